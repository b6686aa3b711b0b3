"""A lease record in a transaction of its own, as the core composes it.

A renewal and a resignation's tombstone are one composition of the
transport's primitives (`commit_lease`): begin, write the record, commit. A
failed write is aborted; a cancelled one is abandoned without waiting and
the transport aborts it before the producer's next transaction, so no
cancellation wedges the producer or leaves its record visible.
"""

from __future__ import annotations

import asyncio

import pytest

from krabka import FencedError, Lease, TransportError, encode_key, encode_lease, lease_key
from krabka.guarded import commit_lease
from krabka.testing import ManualClock, MemoryBroker, MemoryTransport
from tests.support.loop import run_ready_callbacks

STATE = "__coordination_state"
ROLE = "billing"
KEY = encode_key(lease_key(ROLE))
VALUE = encode_lease(Lease("m", 1000, 0, 0, 1))


class Recorded:
    """A transaction that records what is done to it; `fail` names a step that raises."""

    def __init__(self, calls: list[str], fail: dict[str, BaseException]) -> None:
        self.calls = calls
        self.fail = fail

    async def _step(self, name: str) -> None:
        self.calls.append(name)
        if name in self.fail:
            raise self.fail[name]

    async def send(self, topic, value, key=None, partition=None) -> None:
        await self._step("send")

    async def write_lease(self, partition, key, value) -> int:
        await self._step("write_lease")
        return 7

    async def commit(self) -> None:
        await self._step("commit")

    async def abort(self) -> None:
        await self._step("abort")

    def abandon(self) -> None:
        self.calls.append("abandon")


class RecordingWriter:
    def __init__(self, **fail: BaseException) -> None:
        self.calls: list[str] = []
        self.fail = fail

    async def begin_transaction(self, role, token):
        self.calls.append("begin")
        return Recorded(self.calls, self.fail)

    async def release(self, role, token) -> None:
        self.calls.append("release")


async def test_a_lease_write_begins_writes_and_commits_and_returns_the_offset():
    writer = RecordingWriter()
    assert await commit_lease(writer, ROLE, None, 0, KEY, VALUE) == 7
    assert writer.calls == ["begin", "write_lease", "commit"]


@pytest.mark.parametrize("step", ["write_lease", "commit"])
async def test_a_failed_lease_write_is_aborted_and_its_error_raised(step):
    failure = FencedError("superseded")
    writer = RecordingWriter(**{step: failure})
    with pytest.raises(FencedError) as caught:
        await commit_lease(writer, ROLE, None, 0, KEY, VALUE)
    assert caught.value is failure
    assert writer.calls[-1] == "abort"


async def test_an_abort_that_fails_too_leaves_the_writes_own_error():
    failure = TransportError("broker unreachable")
    writer = RecordingWriter(commit=failure, abort=TransportError("still unreachable"))
    with pytest.raises(TransportError) as caught:
        await commit_lease(writer, ROLE, None, 0, KEY, VALUE)
    assert caught.value is failure


async def test_a_cancelled_lease_write_is_abandoned_without_waiting_for_an_abort():
    writer = RecordingWriter()
    blocked = asyncio.Event()

    async def hang(partition, key, value) -> int:
        blocked.set()
        await asyncio.Event().wait()
        return 0

    original = writer.begin_transaction

    async def begin(role, token):
        txn = await original(role, token)
        txn.write_lease = hang
        return txn

    writer.begin_transaction = begin
    task = asyncio.ensure_future(commit_lease(writer, ROLE, None, 0, KEY, VALUE))
    await blocked.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert writer.calls == ["begin", "abandon"]


async def test_a_cancelled_lease_write_never_wedges_the_memory_producer_nor_shows():
    broker = MemoryBroker(clock=ManualClock())
    broker.create_topic(STATE, 4)
    transport = MemoryTransport(broker)
    token = await transport.acquire_epoch(ROLE, 30)
    cancelled = 0
    for yields in range(6):
        task = asyncio.ensure_future(commit_lease(transport, ROLE, token, 0, KEY, VALUE))
        await run_ready_callbacks(yields)  # cancel at a different await each round
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        cancelled += task.cancelled()
        await commit_lease(transport, ROLE, token, 0, KEY, VALUE)
    assert cancelled >= 3  # the early rounds were cut off inside the write
    read = broker.partition(STATE, 0).read_committed(0)
    assert read.last_stable_offset == read.high_watermark  # nothing left open
    # Each round's own write, and the cancelled one only if it had finished.
    assert len(read.records) == 6 + (6 - cancelled)
    assert (await transport.describe_epoch(ROLE)).token == token

"""A tenure's lifecycle on the real broker: clean handovers never overlap, and a
cancelled acquisition leaves no leader behind.

Each member has its own KafkaTransport (its own producers and consumers), so
to the broker the members are separate clients, as separate processes are.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from typing import Any

import pytest

from agents.roles import RoleFunction, RoleRunner, declare
from krabka import (
    Leadership,
    LeadershipOptions,
    acquire_leadership,
    describe_leadership,
    describe_role_state,
)
from krabka.kafka import KafkaTransport
from tests.support.kafka_io import (
    committed_values,
    create_state_and_output_topics,
    settled_role_state,
)
from tests.support.polling import eventually

pytestmark = pytest.mark.integration

OPTIONS = LeadershipOptions(partitions=4, lease_duration=3.0, renew_interval=1.0,
                            challenge_stagger=0.5)
HANDOVERS = 50


class Intervals:
    """When each member's role function ran, on the monotonic clock (ns)."""

    def __init__(self) -> None:
        self.spans: list[tuple[int, int, str]] = []
        self.running: dict[str, int] = {}

    def function(self, member: str) -> RoleFunction:
        async def work(leadership: Leadership) -> None:
            self.running[member] = time.monotonic_ns()
            try:
                await asyncio.Event().wait()
            finally:
                self.spans.append((self.running.pop(member), time.monotonic_ns(), member))
        return work

    def overlaps(self) -> list[tuple[tuple[int, int, str], tuple[int, int, str]]]:
        spans = sorted(self.spans)
        return [(a, b) for a, b in itertools.pairwise(spans) if b[0] < a[1]]


class SlowCloseTransport(KafkaTransport):
    """A producer close that takes 100 ms, as one with requests in flight does.

    Not a wait for anything: it widens the window in which a resignation that
    ran before the function was stopped would let both functions run.
    """

    async def release(self, role, token):
        await asyncio.sleep(0.1)
        await super().release(role, token)


async def test_fifty_clean_handovers_between_two_workers_never_overlap(kafka_bootstrap):
    state, _ = await create_state_and_output_topics(kafka_bootstrap, OPTIONS.partitions)
    name = f"test.handover-{uuid.uuid4().hex[:8]}"
    intervals = Intervals()
    transports = {m: SlowCloseTransport(kafka_bootstrap, topic=state) for m in ("a", "b")}
    runners: dict[str, RoleRunner] = {}

    def start(member: str) -> RoleRunner:
        registry: dict[str, RoleFunction] = {}
        declare(registry, name)(intervals.function(member))
        runner = RoleRunner(transports[member], name, registry[name], member, OPTIONS)
        runner.start()
        runners[member] = runner
        return runner

    async def running(member: str) -> bool:
        return member in intervals.running

    try:
        for transport in transports.values():
            await transport.__aenter__()
        start("a")
        await eventually(lambda: running("a"), bool, within=30)
        start("b")
        await eventually(lambda: describe_role_state(transports["a"], name, OPTIONS.partitions),
                         lambda s: s.roster == ["a", "b"], within=30)
        for handover in range(HANDOVERS):
            leader = next(iter(intervals.running))
            other = "b" if leader == "a" else "a"
            await runners[leader].stop(deregister=False)  # a worker's clean SIGTERM
            await eventually(lambda other=other: running(other), bool, within=15)
            start(leader)  # the worker comes back as the standby
            await eventually(lambda other=other: describe_role_state(transports[other], name,
                                                                     OPTIONS.partitions),
                             lambda s, leader=leader: s.roster[-1:] == [leader], within=15)
            assert len(intervals.spans) == handover + 1
        assert intervals.overlaps() == []
        gaps = [(b[0] - a[1]) / 1e6 for a, b in itertools.pairwise(sorted(intervals.spans))]
        print(f"\n{HANDOVERS} handovers: function-to-function gap min {min(gaps):.1f} ms, "
              f"median {sorted(gaps)[len(gaps) // 2]:.1f} ms, max {max(gaps):.1f} ms")
    finally:
        await asyncio.gather(*(r.stop() for r in runners.values()), return_exceptions=True)
        for transport in transports.values():
            await transport.__aexit__(None, None, None)


class BumpWhenToldTransport(KafkaTransport):
    """A resigning leader whose epoch bump waits until `go` is set, for at most
    `hold` seconds (well inside the lease it still holds): a successor that
    could start before the bump has all the time it needs to open a
    transaction for the bump to land in."""

    def __init__(self, *args: Any, hold: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hold = hold
        self.go = asyncio.Event()

    async def acquire_epoch(self, role, transaction_timeout, current=None):
        if current is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.go.wait(), self.hold)
        return await super().acquire_epoch(role, transaction_timeout, current)


async def test_a_resign_never_fences_a_successor_that_opens_a_transaction_at_once(
        kafka_bootstrap):
    state, output = await create_state_and_output_topics(kafka_bootstrap, OPTIONS.partitions)
    name = f"test.resign-race-{uuid.uuid4().hex[:8]}"
    old = BumpWhenToldTransport(kafka_bootstrap, topic=state, hold=1.0)
    new = KafkaTransport(kafka_bootstrap, topic=state)
    async with old, new:
        leader = await acquire_leadership(old, name, "a", options=OPTIONS)
        standby = asyncio.ensure_future(acquire_leadership(new, name, "b", options=OPTIONS))
        await eventually(lambda: describe_role_state(new, name, OPTIONS.partitions),
                         lambda s: s.roster == ["a", "b"], within=30)
        resigning = asyncio.ensure_future(leader.resign())
        successor = await asyncio.wait_for(standby, 30)
        async with successor.transaction() as txn:
            await txn.send(output, b"successor", partition=0)
            old.go.set()
            await resigning  # the old leader's hand-back ends while this is open
        assert leader.err is None
        assert not successor.fenced(), successor.err
        assert await committed_values(kafka_bootstrap, output) == [b"successor"]
        await successor.resign()


async def test_a_resign_after_a_transaction_was_cut_off_at_the_fence_deadline_clears_the_lease(
        kafka_bootstrap):
    """The function held a guarded transaction open past the fence deadline, so
    the tenure ended with no abort sent; the resignation still aborts it and
    commits the tombstone (the producer refused to begin it before)."""
    state, output = await create_state_and_output_topics(kafka_bootstrap, OPTIONS.partitions)
    name = f"test.cut-off-{uuid.uuid4().hex[:8]}"
    async with KafkaTransport(kafka_bootstrap, topic=state) as transport:
        leadership = await acquire_leadership(transport, name, "a", options=OPTIONS)

        async def hold_a_transaction_open() -> None:
            async with leadership.transaction() as txn:
                await txn.send(output, b"cut off", partition=0)
                await asyncio.Event().wait()

        holding = asyncio.ensure_future(hold_a_transaction_open())
        await asyncio.wait_for(asyncio.shield(leadership.done), OPTIONS.lease_duration * 2)
        holding.cancel()
        await asyncio.gather(holding, return_exceptions=True)
        await leadership.resign()
        role_state = await settled_role_state(transport, name, OPTIONS.partitions)
        assert role_state.lease is None
        assert transport._producers == {}
    assert await committed_values(kafka_bootstrap, output) == []


class CancellingTransport(KafkaTransport):
    """Cancels the calling task at one chosen point of a challenge.

    `point` is ``"<call>:before"`` or ``"<call>:after"``; the cancellation is
    delivered at the caller's next await, which is exactly where a
    ``wait_for`` timeout or a runner stop would land.
    """

    point = ""
    fired = False

    def _at(self, call: str, when: str) -> None:
        if not self.fired and self.point == f"{call}:{when}":
            self.fired = True
            task = asyncio.current_task()
            assert task is not None
            task.cancel()

    async def _hooked(self, call: str, work: Any) -> Any:
        self._at(call, "before")
        result = await work
        self._at(call, "after")
        return result

    async def check_topic(self, partitions, lease_duration):
        return await self._hooked("check_topic", super().check_topic(partitions, lease_duration))

    async def read_partition(self, partition, from_offset=0):
        return await self._hooked("read_partition", super().read_partition(partition,
                                                                           from_offset))

    async def append(self, partition, key, value):
        return await self._hooked("append", super().append(partition, key, value))

    async def acquire_epoch(self, role, transaction_timeout, current=None):
        if current is not None:  # the hand-back's own bump is not a challenge step
            return await super().acquire_epoch(role, transaction_timeout, current)
        return await self._hooked("acquire_epoch",
                                  super().acquire_epoch(role, transaction_timeout))

    async def begin_transaction(self, role, token):
        txn = await self._hooked("begin_transaction", super().begin_transaction(role, token))
        hooks = self

        class Hooked:
            send = txn.send
            abort = txn.abort
            abandon = txn.abandon

            async def write_lease(self, partition, key, value):
                return await hooks._hooked("txn.write_lease",
                                           txn.write_lease(partition, key, value))

            async def commit(self) -> None:
                await hooks._hooked("txn.commit", txn.commit())

        return Hooked()


POINTS = [f"{call}:{when}" for call in ("check_topic", "read_partition", "append",
                                        "acquire_epoch", "begin_transaction",
                                        "txn.write_lease", "txn.commit")
          for when in ("before", "after")]


@pytest.mark.parametrize("point", POINTS)
async def test_cancelling_an_acquisition_at_any_await_point_leaves_no_leader(
        kafka_bootstrap, point):
    state, _ = await create_state_and_output_topics(kafka_bootstrap, OPTIONS.partitions)
    name = f"test.cancel-{uuid.uuid4().hex[:8]}"
    async with CancellingTransport(kafka_bootstrap, topic=state) as transport:
        transport.point = point
        acquiring = asyncio.ensure_future(acquire_leadership(transport, name, "a",
                                                             options=OPTIONS))
        await asyncio.gather(acquiring, return_exceptions=True)
        assert transport.fired
        assert acquiring.cancelled()
        role_state = await settled_role_state(transport, name, OPTIONS.partitions)
        assert role_state.lease is None
        assert transport._producers == {}
        status = await describe_leadership(transport, name)
        assert status.state != "Ongoing"
        if point in ("txn.write_lease:after", "txn.commit:before", "txn.commit:after"):
            # The epoch was minted and handed back: nobody holds the current token.
            assert status.token.producer_epoch >= 1
    # No tenure's task (renewal, fence-deadline watch, topic check) is left.
    assert [t.get_name() for t in asyncio.all_tasks() if name in t.get_name()] == []

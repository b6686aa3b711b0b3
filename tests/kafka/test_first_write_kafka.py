"""On the real broker, a tenure's first guarded write rides in its first
lease's transaction: committed with the lease, and fenced with it."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from krabka import FencingToken, acquire_leadership, describe_role_state
from krabka.format.partition import role_partition
from krabka.kafka import KafkaTransport
from krabka.transport import GuardedTransaction
from tests.support.kafka_io import (
    committed_values,
    create_state_and_output_topics,
    read_committed,
    settled_role_state,
)

pytestmark = pytest.mark.integration

TIMING = {"lease_duration": 3.0, "renew_interval": 1.0, "challenge_stagger": 0.5}
PARTITIONS = 4


class NoticingRelease(KafkaTransport):
    """Sets `released` when a role's producer is closed (a lost challenge closes it)."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.released = asyncio.Event()

    async def release(self, role: str, token: FencingToken) -> None:
        try:
            await super().release(role, token)
        finally:
            self.released.set()


class CountingTransactions(KafkaTransport):
    """Counts the transactions the role's producer began."""

    begun = 0

    async def begin_transaction(self, role: str, token: FencingToken):  # type: ignore[override]
        self.begun += 1
        return await super().begin_transaction(role, token)


async def test_the_first_write_commits_in_the_first_lease_s_transaction(kafka_bootstrap):
    state, output = await create_state_and_output_topics(kafka_bootstrap, PARTITIONS)
    role = f"test.first-{uuid.uuid4().hex[:8]}"

    async def first(txn: GuardedTransaction) -> None:
        await txn.send(output, b"first", partition=0)

    async with CountingTransactions(kafka_bootstrap, topic=state) as transport:
        leadership = await acquire_leadership(transport, role, "a", partitions=PARTITIONS,
                                              first=first, **TIMING)
        assert transport.begun == 1, "the lease and the first write took one transaction"
        # Both are committed by one commit: the lease is the tenure's, and a
        # read_committed reader of the output sees the write.
        role_state = await settled_role_state(transport, role, PARTITIONS)
        assert role_state.lease is not None
        assert role_state.lease.member == "a"
        assert role_state.lease_offset == leadership.tenure
        assert await committed_values(kafka_bootstrap, output) == [b"first"]
        await leadership.resign()


async def test_a_first_write_whose_first_lease_is_fenced_is_never_visible(kafka_bootstrap):
    # A rival mints the role's epoch while b's first lease's transaction is
    # open: b's commit is refused, and its first write is aborted with it.
    state, output = await create_state_and_output_topics(kafka_bootstrap, PARTITIONS)
    role = f"test.first-{uuid.uuid4().hex[:8]}"
    fenced = asyncio.Event()

    async with KafkaTransport(kafka_bootstrap, topic=state) as rival, \
            NoticingRelease(kafka_bootstrap, topic=state) as transport:
        rival_token: FencingToken | None = None

        async def fenced_meanwhile(txn: GuardedTransaction) -> None:
            nonlocal rival_token
            await txn.send(output, b"from a refused tenure", partition=0)
            if rival_token is None:
                rival_token = await rival.acquire_epoch(role, TIMING["lease_duration"])
                fenced.set()

        waiting = asyncio.create_task(acquire_leadership(
            transport, role, "b", partitions=PARTITIONS, first=fenced_meanwhile, **TIMING))
        try:
            await asyncio.wait_for(fenced.wait(), 30)
            # The refused commit is a lost challenge: b closes the producer,
            # backs off and waits.
            await asyncio.wait_for(transport.released.wait(), 30)
            records = await read_committed(kafka_bootstrap, output)
            assert [r.value for r in records] == []
            state_records = await read_committed(kafka_bootstrap, state,
                                                 role_partition(role, PARTITIONS))
            assert all(b"from a refused" not in (r.value or b"") for r in state_records)
            role_state = await describe_role_state(transport, role, PARTITIONS)
            assert role_state.lease is None, "the refused first lease is not on the log"
            assert not waiting.done()
        finally:
            waiting.cancel()
            await asyncio.gather(waiting, return_exceptions=True)
            if rival_token is not None:
                await rival.release(role, rival_token)

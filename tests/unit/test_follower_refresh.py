"""A standby's follower reads only what is new: a refresh from the stable
offset it holds folds the state a read of the whole partition folds, and
what a challenge reads does not grow with the partition's length."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from krabka import (
    STATE_TOPIC,
    PartitionRead,
    Record,
    Registration,
    build_role_state,
    encode_key,
    encode_registration,
    registration_key,
)
from krabka.follower import PartitionFollower
from krabka.format.records import role_of
from krabka.testing import ManualClock, MemoryBroker, MemoryTransport
from krabka.transport import PartitionTail
from tests.support.sim import LEASE, RENEW, Cluster, crash
from tests.support.state_logs import partitions

ROLES = ["r", "s"]


class TailReads(MemoryTransport):
    """A client that keeps every read its tails returned."""

    def __init__(self, broker: MemoryBroker) -> None:
        super().__init__(broker)
        self.tail_reads: list[PartitionRead] = []

    async def tail(self, partition: int, from_offset: int, *,
                   role: str | None = None) -> PartitionTail:
        return _Kept(self.tail_reads, await super().tail(partition, from_offset, role=role))


class _Kept:
    def __init__(self, reads: list[PartitionRead], tail: PartitionTail) -> None:
        self._reads = reads
        self._tail = tail

    async def next(self) -> PartitionRead:
        read = await self._tail.next()
        self._reads.append(read)
        return read

    def returned_to(self) -> int:
        return self._tail.returned_to()

    async def close(self) -> None:
        await self._tail.close()


async def test_a_standby_wakes_only_for_its_own_role_s_records():
    # Two roles on one partition, each renewed by its leader: the standby of
    # "billing" is handed billing's renewals, and no read without a record.
    cluster = Cluster(partitions=1)
    billing = await lead_role(cluster, "a", "billing")
    other = await lead_role(cluster, "c", "other")
    standby = TailReads(cluster.broker)
    waiting = cluster.candidate("b", transport=standby)
    await cluster.advance(RENEW * 5)
    assert standby.tail_reads, "billing renewed while b waited"
    for read in standby.tail_reads:
        assert read.records
        assert {role_of(r.key) for r in read.records} == {"billing"}
    waiting.cancel()
    await billing.resign()
    await other.resign()


class CountingTransport(MemoryTransport):
    """A client that remembers, for each `read_partition`, where it started and
    how many records it returned."""

    def __init__(self, broker: MemoryBroker) -> None:
        super().__init__(broker)
        self.reads: list[tuple[int, int]] = []

    async def read_partition(self, partition: int, from_offset: int = 0) -> PartitionRead:
        read = await super().read_partition(partition, from_offset)
        self.reads.append((from_offset, len(read.records)))
        return read


# One step of a partition's history: a record written outside any
# transaction (None) or inside transaction 0 or 1 (opened by its first
# record), the end of a transaction (commit or abort), a refresh of the
# follower, or a wait that folds what the follower's tail delivered.
steps = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.sampled_from([None, None, 0, 1])),
        st.tuples(st.just("end"), st.sampled_from([0, 1]), st.booleans()),
        st.tuples(st.just("refresh")),
        st.tuples(st.just("wait")),
    ),
    max_size=80,
)


async def replay(records: list[Record], history: list[tuple], role: str) -> None:
    clock = ManualClock()
    broker = MemoryBroker(clock=clock)
    broker.create_topic(STATE_TOPIC, 1)
    log = broker.partition(STATE_TOPIC, 0)
    follower = PartitionFollower(MemoryTransport(broker), 0, role, clock)
    tokens = {txn: broker.init_producer_id(f"writer-{txn}", LEASE) for txn in (0, 1)}
    open_txns: dict[int, object] = {}
    pool = iter(records)
    refreshes = 0
    try:
        for step in history:
            match step:
                case ("write", txn):
                    record = next(pool, None)
                    if record is None:
                        continue
                    if txn is not None and txn not in open_txns:
                        open_txns[txn] = broker.begin(f"writer-{txn}", tokens[txn])
                    broker.produce(STATE_TOPIC, 0, record.key, record.value, record.timestamp,
                                   open_txns.get(txn) if txn is not None else None)
                case ("end", txn, commit):
                    if txn in open_txns:
                        broker.end(open_txns.pop(txn), commit)  # type: ignore[arg-type]
                case ("refresh",):
                    await follower.refresh()
                    refreshes += 1
                    whole = log.read_committed(0)
                    assert follower.state() == build_role_state(role, whole.records)
                    assert (follower.last_stable_offset, follower.high_watermark) == (
                        whole.last_stable_offset, whole.high_watermark)
                case ("wait",):
                    if refreshes:
                        await follower.wait(clock.now_ms())
        for txn in list(open_txns):
            broker.end(open_txns.pop(txn), True)  # type: ignore[arg-type]
        await follower.refresh()
        assert follower.state() == build_role_state(role, log.read_committed(0).records)
    finally:
        await follower.close()


@settings(max_examples=300, deadline=None)
@given(partitions(ROLES, max_size=80), steps, st.sampled_from(ROLES))
def test_a_refresh_from_the_held_offset_folds_what_a_read_from_offset_0_folds(
        records, history, role):
    """Across plain writes, transactions left open over a refresh and then
    committed or aborted, and tail deliveries, every refresh ends with the
    state of the whole partition's committed records."""
    asyncio.run(replay(records, history, role))


async def test_each_refresh_starts_where_the_previous_read_ended():
    broker = MemoryBroker(clock=ManualClock())
    broker.create_topic(STATE_TOPIC, 1)
    transport = CountingTransport(broker)
    follower = PartitionFollower(transport, 0, "billing", broker.clock)
    try:
        await transport.append(0, b"\x00junk", None)
        await follower.refresh()
        await transport.append(0, b"\x00junk", None)
        await transport.append(0, b"\x00junk", None)
        await follower.refresh()
        await follower.refresh()
        assert transport.reads == [(0, 1), (1, 2), (3, 0)]
    finally:
        await follower.close()


async def lead_role(cluster: Cluster, member: str, role: str):
    task = cluster.candidate(member, role=role)
    await cluster.until(task.done, within=1)
    return task.result()


async def fill(transport: MemoryTransport, count: int) -> None:
    """`count` registrations of other roles on partition 0, as many roles'
    traffic fills a shared partition."""
    for i in range(count):
        await transport.append(0, encode_key(registration_key(f"other-{i}", "x")),
                               encode_registration(Registration("x", i)))


async def records_read_by_a_challenge(history: int) -> tuple[int, list[tuple[int, int]]]:
    """A standby on a partition holding `history` records of other roles takes
    over a crashed leader while the other roles keep writing; returns what its
    first read returned and every later read of its campaign."""
    cluster = Cluster(partitions=1)
    filler = cluster.transport()
    await fill(filler, history)
    leader_task = cluster.candidate("a")
    await cluster.until(leader_task.done, within=1)
    leader = leader_task.result()
    standby_transport = CountingTransport(cluster.broker)
    standby = cluster.candidate("b", transport=standby_transport)
    await cluster.advance(0.1)
    await fill(filler, history)  # the partition keeps growing while b waits
    crash(leader)
    await cluster.until(standby.done, within=LEASE * 3)
    await standby.result().resign()
    (first_from, first), *later = standby_transport.reads
    assert first_from == 0
    return first, later


@pytest.mark.parametrize("history", [10, 2000])
async def test_what_a_challenge_reads_does_not_grow_with_the_partition(history):
    first, later = await records_read_by_a_challenge(history)
    assert first >= history  # the one read from offset 0, at start
    assert later, "the challenge re-reads before it mints an epoch"
    assert all(start > history for start, _ in later)
    assert sum(count for _, count in later) <= 3  # its own registration, a's last lease

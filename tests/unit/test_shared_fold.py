"""A worker's followers share one fold per partition: a follower that starts
late folds the state a read of the whole partition folds, reads only what
was committed since another follower last read, and never misses a record
committed before it started."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from krabka import (
    STATE_TOPIC,
    PartitionRead,
    Registration,
    build_role_state,
    encode_key,
    encode_registration,
    registration_key,
)
from krabka.follower import PartitionFollower
from krabka.shared_fold import lease_length_ms
from krabka.testing import ManualClock, MemoryBroker, MemoryTransport
from tests.support.sim import LEASE
from tests.support.state_logs import partitions

ROLES = ["r", "s", "t"]


class CountingTransport(MemoryTransport):
    """A client that remembers how many records each `read_partition` returned."""

    def __init__(self, broker: MemoryBroker) -> None:
        super().__init__(broker)
        self.reads: list[int] = []

    async def read_partition(self, partition: int, from_offset: int = 0) -> PartitionRead:
        read = await super().read_partition(partition, from_offset)
        self.reads.append(len(read.records))
        return read


def one_partition() -> MemoryBroker:
    broker = MemoryBroker(clock=ManualClock())
    broker.create_topic(STATE_TOPIC, 1)
    return broker


# One step of a partition's history: a record written outside any
# transaction (None) or inside the one open transaction, the end of that
# transaction (commit or abort), or a follower of a role starting.
steps = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.sampled_from([None, None, 0])),
        st.tuples(st.just("end"), st.booleans()),
        st.tuples(st.just("start"), st.sampled_from([*ROLES, "never-written"])),
    ),
    max_size=80,
)


async def replay(records, history, placement) -> None:
    broker = one_partition()
    log = broker.partition(STATE_TOPIC, 0)
    transport = MemoryTransport(broker)
    token = broker.init_producer_id("writer", LEASE)
    txn = None
    pool = iter(records)
    followers: list[PartitionFollower] = []
    try:
        for step in history:
            match step:
                case ("write", in_txn):
                    record = next(pool, None)
                    if record is None:
                        continue
                    if in_txn is not None and txn is None:
                        txn = broker.begin("writer", token)
                    broker.produce(STATE_TOPIC, 0, record.key, record.value, record.timestamp,
                                   txn if in_txn is not None else None)
                case ("end", commit):
                    if txn is not None:
                        broker.end(txn, commit)
                        txn = None
                case ("start", role):
                    follower = PartitionFollower(transport, 0, role, broker.clock, placement)
                    followers.append(follower)
                    await follower.refresh()
                    whole = log.read_committed(0)
                    assert follower.state() == build_role_state(role, whole.records,
                                                                placement=placement)
                    assert (follower.last_stable_offset, follower.high_watermark) == (
                        whole.last_stable_offset, whole.high_watermark)
                    assert follower.longest_lease_ms == max(
                        (length for r in whole.records
                         if (length := lease_length_ms(r)) is not None), default=0)
    finally:
        for follower in followers:
            await follower.close()


@settings(max_examples=150, deadline=None)
@given(partitions(ROLES, max_size=80), steps, st.sampled_from([None, "balanced"]))
def test_a_follower_starting_from_the_shared_fold_folds_what_a_read_from_offset_0_folds(
        records, history, placement):
    """Across plain writes, transactions left open over a start and then
    committed or aborted, malformed records and keys that name no role,
    every follower that starts, whenever it starts, holds the state, the
    marks and the longest lease of the whole partition's committed records."""
    asyncio.run(replay(records, history, placement))


async def fill(transport: MemoryTransport, count: int, prefix: str) -> None:
    """`count` registrations of other roles on partition 0."""
    for i in range(count):
        await transport.append(0, encode_key(registration_key(f"{prefix}-{i}", "x")),
                               encode_registration(Registration("x", i)))


async def test_followers_starting_one_after_another_read_each_record_once():
    broker = one_partition()
    transport = CountingTransport(broker)
    await fill(transport, 2000, "other")
    followers = []
    try:
        for i in range(50):
            followers.append(follower := PartitionFollower(transport, 0, f"role-{i}",
                                                           broker.clock))
            await follower.refresh()
            await fill(transport, 10, f"more-{i}")
        # Alone, each would read the partition from offset 0: 50 reads of 2000+.
        assert sum(transport.reads) == 2000 + 49 * 10
    finally:
        for follower in followers:
            await follower.close()


async def test_followers_starting_together_share_a_read():
    broker = one_partition()
    transport = CountingTransport(broker)
    await fill(transport, 500, "other")
    followers = [PartitionFollower(transport, 0, f"role-{i}", broker.clock)
                 for i in range(100)]
    try:
        await asyncio.gather(*(follower.refresh() for follower in followers))
        assert len(transport.reads) <= 2
    finally:
        for follower in followers:
            await follower.close()


class HeldTransport(MemoryTransport):
    """A client whose reads take their records at once and answer when released."""

    def __init__(self, broker: MemoryBroker) -> None:
        super().__init__(broker)
        self.release = asyncio.Event()
        self.reading = asyncio.Event()

    async def read_partition(self, partition: int, from_offset: int = 0) -> PartitionRead:
        read = await super().read_partition(partition, from_offset)
        self.reading.set()
        await self.release.wait()
        return read


async def test_a_follower_never_gets_a_shared_read_that_began_before_it_started():
    broker = one_partition()
    transport = HeldTransport(broker)
    early = PartitionFollower(transport, 0, "early", broker.clock)
    late = PartitionFollower(transport, 0, "late", broker.clock)
    try:
        first = asyncio.create_task(early.refresh())
        await transport.reading.wait()  # a read began, before "late" registered
        await transport.append(0, encode_key(registration_key("late", "m")),
                               encode_registration(Registration("m", 1)))
        second = asyncio.create_task(late.refresh())
        transport.release.set()
        await asyncio.gather(first, second)
        assert [entry.member for entry in late.state().entries] == ["m"]
    finally:
        await early.close()
        await late.close()


async def test_followers_fold_on_from_copies_of_the_shared_state():
    broker = one_partition()
    transport = MemoryTransport(broker)
    first = PartitionFollower(transport, 0, "r", broker.clock)
    second = PartitionFollower(transport, 0, "r", broker.clock)
    try:
        await transport.append(0, encode_key(registration_key("r", "a")),
                               encode_registration(Registration("a", 1)))
        await first.refresh()
        await transport.append(0, encode_key(registration_key("r", "b")),
                               encode_registration(Registration("b", 2)))
        await first.refresh()  # folds b into its own copy
        assert [entry.member for entry in first.state().entries] == ["a", "b"]
        await transport.append(0, encode_key(registration_key("r", "c")),
                               encode_registration(Registration("c", 3)))
        await second.refresh()
        assert [entry.member for entry in second.state().entries] == ["a", "b", "c"]
        assert [entry.member for entry in first.state().entries] == ["a", "b"]
    finally:
        await first.close()
        await second.close()

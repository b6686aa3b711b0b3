"""What a challenger reads of its partition: nothing its tail just delivered,
and everything committed since an older read."""

from __future__ import annotations

from krabka import (
    FencingToken,
    LeadershipOptions,
    Lease,
    PartitionRead,
    encode_key,
    encode_lease,
    lease_key,
    role_partition,
)
from krabka.guarded import commit_lease
from krabka.testing import MemoryTransport
from tests.support.sim import LEASE, RENEW, STAGGER, Cluster, crash, lead


class CountingReads(MemoryTransport):
    """A client that keeps the start of every partition read it made."""

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(cluster.broker)
        self.reads: list[int] = []

    async def read_partition(self, partition: int, from_offset: int = 0) -> PartitionRead:
        self.reads.append(from_offset)
        return await super().read_partition(partition, from_offset)


async def test_a_standby_takes_a_resigned_role_on_what_its_tail_delivered_without_reading_again():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    standby = CountingReads(cluster)
    waiting = cluster.candidate("b", transport=standby)
    await cluster.advance(LEASE)
    standby.reads.clear()
    await leader.resign()
    await cluster.until(waiting.done, within=STAGGER)
    taker = waiting.result()
    assert taker.member == "b"
    assert standby.reads == [], "its tail had delivered all the challenge decided and checked on"
    await taker.resign()


async def test_a_challenge_at_a_slot_long_after_the_last_read_reads_the_partition_again():
    # The leader crashed: b's last read is the last renewal, a lease ago, when
    # its slot comes; it decides on a read made then.
    cluster = Cluster()
    leader = await lead(cluster, "a")
    standby = CountingReads(cluster)
    waiting = cluster.candidate("b", transport=standby)
    await cluster.advance(LEASE)
    crash(leader)
    standby.reads.clear()
    await cluster.until(waiting.done, within=LEASE * 2)
    taker = waiting.result()
    assert taker.member == "b"
    assert len(standby.reads) == 1
    await taker.resign()


class RivalLeasesFirst(CountingReads):
    """Just before this client's InitProducerId, a rival's first lease commits:
    a tenure that began after this member decided to challenge."""

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(cluster)
        self.cluster = cluster
        self.rival_deadline: int | None = None

    async def acquire_epoch(self, role: str, transaction_timeout: float,
                            current: FencingToken | None = None) -> FencingToken:
        if current is None and self.rival_deadline is None:
            rival = self.cluster.transport()
            token = await rival.acquire_epoch(role, transaction_timeout)
            now = self.cluster.clock.now_ms()
            self.rival_deadline = now + round(LEASE * 1000)
            lease = Lease("c", token.producer_id, token.producer_epoch, now,
                          self.rival_deadline)
            await commit_lease(rival, role, token, role_partition(role, self.cluster.partitions),
                               encode_key(lease_key(role)), encode_lease(lease))
            self.reads.clear()
        return await super().acquire_epoch(role, transaction_timeout, current)


async def test_a_tenure_begun_after_the_decision_is_found_in_what_the_tail_delivered():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    standby = RivalLeasesFirst(cluster)
    waiting = cluster.candidate("b", transport=standby)
    await cluster.advance(LEASE)
    await leader.resign()
    await cluster.until(waiting.done, within=STAGGER)
    taker = waiting.result()
    assert standby.rival_deadline is not None
    margin_ms = LeadershipOptions(lease_duration=LEASE, renew_interval=RENEW).margin_ms
    assert taker.predecessor_until == standby.rival_deadline - margin_ms
    assert standby.reads == [], "the tail had delivered the rival's lease"
    await taker.resign()

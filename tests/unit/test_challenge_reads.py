"""What a challenger reads of its partition: nothing its tail just delivered,
and everything committed since an older read."""

from __future__ import annotations

from coordination import MemoryTransport, PartitionRead
from tests.support.sim import LEASE, STAGGER, Cluster, crash, lead


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

"""The standby first in line has its transport get its challenge ready.

`Transport.prepare_epoch` mints nothing (on Kafka it connects the role's
producer ahead of InitProducerId, `krabka.kafka.producer.prepared`); these tests
pin down who asks for it and when it is given up, on the in-process model.
"""

from collections.abc import Collection

from krabka import FencingToken, describe_leadership
from krabka.rules.evaluate import rendezvous_weight
from krabka.testing import MemoryTransport
from tests.support.sim import LEASE, STAGGER, Cluster, lead


async def test_only_the_standby_first_in_line_prepares_its_challenge():
    cluster = Cluster()
    await lead(cluster, "a")
    first, second = cluster.transport(), cluster.transport()
    b = cluster.candidate("b", transport=first)
    await cluster.settle()
    c = cluster.candidate("c", transport=second)
    await cluster.advance(LEASE)
    assert first.prepared == {"billing"}
    assert second.prepared == set()
    b.cancel()
    c.cancel()


async def test_preparing_mints_nothing_and_the_leader_stays_authoritative():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    standby = cluster.transport()
    waiting = cluster.candidate("b", transport=standby)
    await cluster.advance(LEASE * 3)
    assert standby.prepared == {"billing"}
    status = await describe_leadership(cluster.transport(), "billing")
    assert status.authoritative(leader.token)
    assert not leader.done.done()
    waiting.cancel()


async def test_the_challenge_takes_what_was_prepared():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    standby = cluster.transport()
    waiting = cluster.candidate("b", transport=standby)
    await cluster.advance(LEASE)
    assert standby.prepared == {"billing"}
    await leader.resign()
    await cluster.until(waiting.done, within=LEASE)
    assert waiting.result().member == "b"
    assert standby.prepared == set()


async def test_a_standby_that_stops_waiting_discards_its_preparation():
    cluster = Cluster()
    await lead(cluster, "a")
    standby = cluster.transport()
    waiting = cluster.candidate("b", transport=standby)
    await cluster.advance(LEASE)
    assert standby.prepared == {"billing"}
    waiting.cancel()
    await cluster.settle()
    assert standby.prepared == set()


async def test_a_standby_no_longer_first_in_line_discards_its_preparation():
    # Under balanced placement a member that registers later can rank ahead.
    names = sorted((f"m{i}" for i in range(8)),
                   key=lambda name: -rendezvous_weight("billing", name))
    ahead, behind = names[0], names[1]
    cluster = Cluster()
    await lead(cluster, "a", placement="balanced")
    standby = cluster.transport()
    waiting = cluster.candidate(behind, transport=standby, placement="balanced")
    await cluster.advance(LEASE)
    assert standby.prepared == {"billing"}
    newcomer = cluster.candidate(ahead, placement="balanced")
    await cluster.advance(LEASE)
    assert standby.prepared == set()
    waiting.cancel()
    newcomer.cancel()


async def test_the_standby_first_in_line_prepares_its_declared_outputs_in_epoch_mode():
    # Epoch mode fences every topic through the role's producer: outputs= is a
    # hint there, read ahead so the first guarded write waits for no metadata.
    cluster = Cluster()
    await lead(cluster, "a")
    standby = cluster.transport()
    waiting = cluster.candidate("b", transport=standby, outputs=("invoices", "audit"))
    await cluster.advance(LEASE)
    assert standby.prepared_outputs == {"billing": ("invoices", "audit")}
    waiting.cancel()


class SlowToConnect(MemoryTransport):
    """A process whose role producer takes `connect_ms` of clock time to connect
    before its InitProducerId, as a Kafka producer's bootstrap, metadata and
    coordinator lookup can on a process starting hundreds of roles. Only a
    waited preparation connects ahead."""

    def __init__(self, cluster: Cluster, connect_ms: int) -> None:
        super().__init__(cluster.broker)
        self.connect_ms = connect_ms
        self.connected: set[str] = set()

    async def _connect(self) -> None:
        await self.clock.sleep_until(self.clock.now_ms() + self.connect_ms)

    async def prepare_epoch(self, role: str, transaction_timeout: float, partition: int,
                            outputs: Collection[str] = (), *, wait: bool = False) -> None:
        await super().prepare_epoch(role, transaction_timeout, partition, outputs, wait=wait)
        if wait:
            await self._connect()
            self.connected.add(role)

    async def discard_prepared(self, role: str) -> None:
        self.connected.discard(role)
        await super().discard_prepared(role)

    async def acquire_epoch(self, role: str, transaction_timeout: float,
                            current: FencingToken | None = None) -> FencingToken:
        if current is None and role not in self.connected:
            await self._connect()
        self.connected.discard(role)
        return await super().acquire_epoch(role, transaction_timeout, current)


async def test_a_slow_to_connect_challenger_decides_after_connecting_and_fences_nobody():
    # A role never leased: "b" registered first and challenges at once, but its
    # producer takes four staggers to connect; "c", next in order, challenges
    # one stagger later and takes the role.
    cluster = Cluster()
    slow = SlowToConnect(cluster, connect_ms=round(STAGGER * 4000))
    b = cluster.candidate("b", transport=slow)
    await cluster.settle()
    c = cluster.candidate("c")
    await cluster.until(c.done, within=STAGGER * 3)
    taker = c.result()
    await cluster.advance(STAGGER * 8)
    assert not b.done(), "the slow challenger minted an epoch on a read older than c's tenure"
    status = await describe_leadership(cluster.transport(), "billing")
    assert status.authoritative(taker.token)
    assert not taker.done.done()
    # What its withdrawn challenge connected was given up; first in line, it
    # prepares again as it waits, as a standby does.
    assert slow.connected == set()
    assert slow.prepared == {"billing"}
    b.cancel()
    await taker.resign()

"""A tenure's first guarded write rides in the transaction of its first lease
(`acquire_leadership`'s ``first``): visible with the lease, and only if the
lease commits."""

from __future__ import annotations

import pytest

from krabka import (
    FencingToken,
    GuardedTransaction,
    LeaderRunner,
    Leadership,
    LeadershipOptions,
    acquire_leadership,
    describe_leadership,
    describe_role_state,
)
from krabka.testing import MemoryTransport
from krabka.testing.memory import _MemoryTransaction
from tests.support.sim import LEASE, RENEW, STAGGER, Cluster, lead


class CountingTransactions(MemoryTransport):
    """A client that counts the transactions it began."""

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(cluster.broker)
        self.begun = 0

    async def begin_transaction(self, role: str, token: FencingToken) -> _MemoryTransaction:
        self.begun += 1
        return await super().begin_transaction(role, token)


async def write_hello(txn: GuardedTransaction) -> None:
    await txn.send("out", b"hello", partition=0)


async def test_the_first_write_commits_in_the_first_lease_s_transaction():
    cluster = Cluster()
    transport = CountingTransactions(cluster)
    leadership = await lead(cluster, "a", transport=transport, first=write_hello)
    assert cluster.out_values() == [b"hello"]
    assert transport.begun == 1, "the lease and the first write took one transaction"
    status = await describe_leadership(cluster.transport(), "billing")
    assert status.authoritative(leadership.token)
    await leadership.resign()


async def test_a_first_write_whose_lease_is_refused_is_never_visible():
    # b's epoch is fenced while its first lease's transaction is open (a rival
    # minted a newer one): the commit is refused, and the first write with it.
    cluster = Cluster()
    rival = cluster.transport()
    calls = 0

    async def fenced_meanwhile(txn: GuardedTransaction) -> None:
        nonlocal calls
        calls += 1
        await txn.send("out", b"from a refused tenure", partition=0)
        if calls == 1:
            await rival.acquire_epoch("billing", LEASE)

    waiting = cluster.candidate("b", first=fenced_meanwhile)
    await cluster.until(lambda: calls >= 1, within=1)
    await cluster.settle()
    assert cluster.out_values() == []
    assert not waiting.done(), "a refused first lease is a lost challenge"
    waiting.cancel()
    await cluster.settle()


async def test_an_error_in_the_first_write_ends_the_campaign_with_no_live_lease():
    cluster = Cluster()

    async def broken(txn: GuardedTransaction) -> None:
        await txn.send("out", b"half done", partition=0)
        raise RuntimeError("the caller's bug")

    waiting = cluster.candidate("b", first=broken)
    await cluster.until(waiting.done, within=1)
    with pytest.raises(RuntimeError, match="the caller's bug"):
        waiting.result()
    assert cluster.out_values() == []
    state = await describe_role_state(cluster.transport(), "billing", cluster.partitions)
    assert state.lease is None


async def test_a_first_write_is_refused_in_term_mode_before_any_io():
    cluster = Cluster()
    with pytest.raises(ValueError, match="epoch mode"):
        await acquire_leadership(cluster.transport(), "billing", "a", fencing="term",
                                 first=write_hello)

    async def fn(leadership: Leadership) -> None:
        pass

    with pytest.raises(ValueError, match="epoch mode"):
        LeaderRunner(cluster.transport(), "billing", "a", fn,
                     options=LeadershipOptions(fencing="term"), first=write_hello)


async def test_the_runner_s_function_starts_after_its_first_write_committed():
    cluster = Cluster()
    seen: list[list[bytes | None]] = []

    async def fn(leadership: Leadership) -> None:
        seen.append(cluster.out_values())

    runner = LeaderRunner(cluster.transport(), "billing", "a", fn, clock=cluster.clock,
                          options=LeadershipOptions(4, LEASE, RENEW, STAGGER),
                          first=write_hello)
    runner.start()
    try:
        await cluster.until(lambda: bool(seen), within=1)
    finally:
        await cluster.stop_runners(runner)
    assert seen[0] == [b"hello"]

"""Leadership rules on the real broker, with several members in one test process.

Each member has its own KafkaTransport, hence its own producers: to the
broker they are separate clients, exactly as separate processes are. The
simultaneous challenge runs in both fencing modes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from krabka import (
    FencedError,
    FencingToken,
    Leadership,
    LeadershipStatus,
    acquire_leadership,
    describe_leadership,
    describe_role_state,
)
from krabka.format.records import Lease, encode_key, encode_lease, lease_key
from krabka.format.terms import TermKind, decode_term_key
from krabka.kafka import KafkaTransport
from krabka.kafka.protocol.messages import TRANSACTIONAL_ID_NOT_FOUND
from krabka.rules.evaluate import rendezvous_weight
from krabka.term.tenure import TermLeadership
from tests.faults.faults import stop_the_world_until
from tests.support.kafka_io import (
    committed_values,
    create_state_and_output_topics,
    terms_topic_of,
    terms_view,
    transactional_id_error,
)
from tests.support.polling import eventually

pytestmark = pytest.mark.integration

LEASE = 3.0
TIMING = {"lease_duration": LEASE, "renew_interval": 1.0, "challenge_stagger": 0.5}


@pytest.fixture
async def cluster(kafka_bootstrap):
    """Transports for the members of one test; all closed at the end."""
    opened: list[KafkaTransport] = []

    class Cluster:
        bootstrap = kafka_bootstrap
        role = f"test.role-{uuid.uuid4().hex[:8]}"

        async def setup(self, partitions: int = 4) -> None:
            self.partitions = partitions
            self.state, self.output = await create_state_and_output_topics(
                kafka_bootstrap, partitions)

        def new_transport(self, kind: type[KafkaTransport] = KafkaTransport) -> KafkaTransport:
            return kind(kafka_bootstrap, topic=self.state,
                        terms_topic=terms_topic_of(self.state))

        async def transport(self) -> KafkaTransport:
            transport = self.new_transport()
            await transport.__aenter__()
            opened.append(transport)
            return transport

        async def acquire(self, member: str, role: str | None = None,
                          transport: KafkaTransport | None = None, **options: Any):
            return await acquire_leadership(
                transport or await self.transport(), role or self.role, member,
                partitions=self.partitions, **{**TIMING, **options},
            )

    yield Cluster()
    for transport in opened:
        await transport.__aexit__(None, None, None)


def stop_renewing(leadership: Leadership) -> None:
    """The leader's process hangs: no renewals, no fence-deadline watcher."""
    for task in leadership._tasks:
        task.cancel()


class BarrierTransport(KafkaTransport):
    """Holds every InitProducerId at a barrier, so all challenges start together."""

    barrier: asyncio.Barrier

    async def acquire_epoch(self, role, transaction_timeout, current=None):
        if current is None:
            await self.barrier.wait()
        return await super().acquire_epoch(role, transaction_timeout, current)


class ClaimBarrierTransport(KafkaTransport):
    """Holds each member's first claim of a term at a barrier, so all claims are sent together."""

    barrier: asyncio.Barrier
    held = False

    async def append_term(self, partition, key, value):
        if not self.held and decode_term_key(key).kind is TermKind.CLAIM:
            self.held = True
            await self.barrier.wait()
        return await super().append_term(partition, key, value)


STANDBYS = ("b", "c", "d")


@contextlib.asynccontextmanager
async def challenging_together(
    cluster, barrier_transport: type[KafkaTransport], **options: Any
) -> AsyncIterator[list[asyncio.Task[Leadership]]]:
    """Three standbys whose challenges the barrier starts at one instant, with no stagger."""
    barrier = asyncio.Barrier(len(STANDBYS))
    standbys = []
    try:
        for member in STANDBYS:
            transport = cluster.new_transport(barrier_transport)
            transport.barrier = barrier
            await transport.__aenter__()
            standbys.append((transport, asyncio.create_task(
                cluster.acquire(member, transport=transport, challenge_stagger=0.0,
                                **options))))
        yield [task for _, task in standbys]
    finally:
        for transport, task in standbys:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await transport.__aexit__(None, None, None)


async def test_simultaneous_challenges_leave_one_leader_and_mint_few_epochs(cluster):
    await cluster.setup()
    leader = await cluster.acquire("a")
    async with challenging_together(cluster, BarrierTransport) as tasks:
        observer = await cluster.transport()
        before = (await describe_leadership(observer, cluster.role)).token
        stop_renewing(leader)
        done, _ = await asyncio.wait(tasks, timeout=LEASE * 10,
                                     return_when=asyncio.FIRST_COMPLETED)
        assert done, "no standby took over"

        async def leaders_and_status() -> tuple[list[FencingToken], LeadershipStatus]:
            leading = [t.result().token for t in tasks
                       if t.done() and not t.result().done.done()]
            return leading, await describe_leadership(observer, cluster.role)

        def sole_authoritative(found: tuple[list[FencingToken], LeadershipStatus]) -> bool:
            leading, status = found
            return len(leading) == 1 and status.authoritative(leading[0])

        # A member that won a write but lost the epoch meets its fence at its
        # next renewal, within a renew interval; a challenger whose retried
        # InitProducerId fenced the first winner may still be committing its
        # own first lease when that winner is seen.
        _, status = await eventually(leaders_and_status, sole_authoritative, within=LEASE * 2)
        assert status.token.producer_id == before.producer_id
        # Each InitProducerId bumps once, and once more when it meets another
        # challenger's open lease transaction (the coordinator aborts it, answers
        # CONCURRENT_TRANSACTIONS, and the retry bumps again): at most two a standby.
        assert status.token.producer_epoch - before.producer_epoch <= 2 * len(STANDBYS)


async def test_simultaneous_claims_of_a_term_leave_one_leader_the_first_claim_in_offset_order(
    cluster,
):
    """Term mode: every standby claims term 2 at once; the first claim in offset
    order wins it, the others read that claim before their own and go back to
    following, and no transactional id is ever named."""
    await cluster.setup()
    term = {"fencing": "term", "outputs": [cluster.output]}
    leader = await cluster.acquire("a", **term)
    async with challenging_together(cluster, ClaimBarrierTransport, **term) as tasks:
        stop_renewing(leader)  # its heartbeats stop
        done, _ = await asyncio.wait(tasks, timeout=LEASE * 10,
                                     return_when=asyncio.FIRST_COMPLETED)
        assert done, "no standby took over"

        observer = await cluster.transport()

        async def claims_of_term_2() -> list[tuple[int, str]]:
            read = await observer.read_terms(leader.partition)
            keys = [(r.offset, decode_term_key(r.key)) for r in read.records]
            return [(offset, key.member) for offset, key in keys
                    if key.kind is TermKind.CLAIM and key.term == 2]

        # Every standby claimed term 2 before it read another's claim: they raced.
        claims = await eventually(claims_of_term_2, lambda c: len(c) == len(STANDBYS),
                                  within=LEASE * 2)
        [winner] = [task.result() for task in tasks if task.done()]
        assert isinstance(winner, TermLeadership)
        assert winner.token.term == 2
        assert (winner.tenure, winner.member) == min(claims)
        assert not winner.done.done()
        view = await terms_view(cluster.bootstrap, cluster.state, cluster.role,
                                cluster.partitions)
        assert (view.term, view.holder) == (2, winner.member)
        assert sum(not task.done() for task in tasks) == len(STANDBYS) - 1
        await winner.resign()
    assert await transactional_id_error(cluster.bootstrap, cluster.role) == \
        TRANSACTIONAL_ID_NOT_FOUND


async def test_a_stuck_stable_offset_does_not_depose_another_roles_live_leader(cluster):
    await cluster.setup(partitions=1)  # both roles share the only partition
    other_role = cluster.role + ".other"
    other_transport = await cluster.transport()
    other = await cluster.acquire("x", role=other_role, transport=other_transport)
    leader = await cluster.acquire("a")
    standby = asyncio.create_task(cluster.acquire("b"))
    # The other role's holder dies in the middle of a lease transaction.
    stop_renewing(other)
    txn = await other_transport.begin_transaction(other_role, other.token)
    lease = Lease("x", other.token.producer_id, other.token.producer_epoch, 0, 1)
    await txn.write_lease(0, encode_key(lease_key(other_role)), encode_lease(lease))
    try:
        # Longer than the lease, the coordinator's abort of the dead transaction,
        # and the standby's hold all together.
        done, _ = await asyncio.wait([standby, leader.done], timeout=LEASE * 4)
        assert not done, "the live leader was deposed or ended"
        status = await describe_leadership(await cluster.transport(), cluster.role)
        assert status.authoritative(leader.token)
    finally:
        standby.cancel()
        await asyncio.gather(standby, return_exceptions=True)


async def test_bug_a_deposed_leaders_resign_fenced_its_successors_open_transaction(cluster):
    """Found by the real-process fault runs (the frozen zombie): the
    conditional InitProducerId of a superseded token aborted the successor's
    open transaction, because Kafka checks only the producer id first."""
    await cluster.setup()
    zombie = await cluster.acquire("a")
    stop_renewing(zombie)  # hung: its lease lapses, its producer stays open
    successor = await asyncio.wait_for(cluster.acquire("b"), LEASE * 4)
    async with successor.transaction() as txn:
        await txn.send(cluster.output, b"successor", partition=0)
        await zombie.resign(deregister=False)
    assert await committed_values(cluster.bootstrap, cluster.output) == [b"successor"]
    assert not successor.done.done()
    await successor.resign()


async def test_a_transaction_held_open_past_the_lease_is_fenced_by_the_coordinator(cluster):
    await cluster.setup()
    leader = await cluster.acquire("a")

    def coordinator_moved_on() -> bool:
        answer = subprocess.run(
            [sys.executable, "-m", "krabka", "describe", cluster.role,
             "--bootstrap-servers", cluster.bootstrap],
            capture_output=True, text=True, timeout=30, check=True)
        token = json.loads(answer.stdout)["token"]
        return token != {"producer_id": leader.token.producer_id,
                         "producer_epoch": leader.token.producer_epoch}

    observer = await cluster.transport()

    async def paused_transaction() -> None:
        async with leader.transaction() as txn:
            await txn.send(cluster.output, b"before the pause", partition=0)
            # Only a transaction the coordinator knows of (a partition added) can time out.
            await eventually(lambda: describe_leadership(observer, cluster.role),
                             lambda status: status.state == "Ongoing", within=LEASE)
            # The whole process stops (a GC pause, a stopped VM) until the
            # coordinator has aborted the transaction for its timeout.
            stop_the_world_until(coordinator_moved_on, within=LEASE * 10)
            await txn.send(cluster.output, b"after the pause", partition=0)

    with pytest.raises(FencedError):
        await paused_transaction()
    assert isinstance(leader.err, FencedError)
    status = await describe_leadership(observer, cluster.role)
    assert status.token.producer_id == leader.token.producer_id
    assert status.token.producer_epoch > leader.token.producer_epoch
    assert await committed_values(cluster.bootstrap, cluster.output) == []

async def test_200_renewals_keep_the_token_and_only_the_current_tenure_is_authoritative(
    cluster,
):
    await cluster.setup()
    transport = await cluster.transport()
    features = await transport.api_versions()
    assert features.finalized_level("transaction.version") >= 2
    first = await cluster.acquire("a", transport=transport, renew_interval=0.005)
    renewals = 0

    def renewed(_lease, _latency) -> None:
        nonlocal renewals
        renewals += 1

    first.on_renewed = renewed

    async def renewed_so_far() -> int:
        return renewals

    await eventually(renewed_so_far, lambda count: count >= 200, within=120)
    observer = await cluster.transport()
    status = await describe_leadership(observer, cluster.role)
    assert status.token == first.token
    assert status.authoritative(first.token)
    await first.resign()
    second = await cluster.acquire("b")
    status = await describe_leadership(observer, cluster.role)
    assert not status.authoritative(first.token)
    assert status.authoritative(second.token)
    assert second.tenure > first.tenure


async def test_under_balanced_placement_a_resigned_role_goes_to_the_standby_the_hash_prefers(
        cluster):
    await cluster.setup()
    first, second = "standby-a", next(
        name for name in (f"standby-{i}" for i in range(100))
        if rendezvous_weight(cluster.role, name) > rendezvous_weight(cluster.role, "standby-a"))
    # The stagger keeps the preferred member's win clear of the other's slot.
    timing = {"placement": "balanced", "challenge_stagger": 2.0}
    leader = await cluster.acquire("leader", **timing)
    waiting = {}
    observer = await cluster.transport()
    try:
        for name in (first, second):  # registered in this order
            waiting[name] = asyncio.create_task(cluster.acquire(name, **timing))
            await eventually(
                lambda: describe_role_state(observer, cluster.role, cluster.partitions),
                lambda state, name=name: name in state.roster, within=10)
        await leader.resign()
        done, _ = await asyncio.wait(waiting.values(), timeout=10,
                                     return_when=asyncio.FIRST_COMPLETED)
        assert [task.result().member for task in done] == [second]
        # A commit's markers land just after it returns: poll the read.
        state = await eventually(
            lambda: describe_role_state(observer, cluster.role, cluster.partitions,
                                        placement="balanced", challenge_stagger=2.0),
            lambda state: state.holder == second, within=10)
        assert state.out_of_order == 0
        await waiting[second].result().resign()
    finally:
        for task in waiting.values():
            task.cancel()
        await asyncio.gather(*waiting.values(), return_exceptions=True)

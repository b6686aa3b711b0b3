"""acquire_leadership and Leadership on the in-process model, with time driven by hand.

The same behaviours run against a real broker in the integration suite; here
each rule of docs/design.md#the-election-rules is pinned down deterministically.
"""

import asyncio

import pytest

from krabka import (
    STATE_TOPIC,
    EpochLostError,
    FencedError,
    LeadershipOptions,
    StateTopicError,
    TransportError,
    acquire_leadership,
    describe_leadership,
    describe_role_state,
)
from krabka.testing import MemoryTransport
from tests.support.loop import run_ready_callbacks
from tests.support.sim import LEASE, RENEW, STAGGER, Cluster, SkewedClock, crash, lead


async def test_the_first_registered_member_leads_at_once():
    cluster = Cluster()
    leadership = await lead(cluster, "a")
    status = await describe_leadership(cluster.transport(), "billing")
    assert status.authoritative(leadership.token)
    assert leadership.member == "a"


async def test_the_tenure_is_the_offset_of_the_first_lease_record():
    cluster = Cluster()
    leadership = await lead(cluster, "a")
    state = await describe_role_state(cluster.transport(), "billing", cluster.partitions)
    assert state.tenure == leadership.tenure
    assert state.holder == "a"


async def test_a_live_leader_keeps_the_role_while_it_renews():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    standby = cluster.candidate("b")
    await cluster.advance(LEASE * 10)
    assert not standby.done()
    assert not leader.done.done()
    assert (await describe_leadership(cluster.transport(), "billing")).authoritative(leader.token)
    standby.cancel()


async def test_renewals_keep_the_token_and_the_tenure():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    token, tenure = leader.token, leader.tenure
    await cluster.advance(LEASE * 5)
    state = await describe_role_state(cluster.transport(), "billing", cluster.partitions)
    assert (leader.token, state.tenure, state.token) == (token, tenure, token)
    assert state.lease.granted_at > leader.tenure


async def test_the_first_challenger_takes_over_at_the_crashed_leaders_deadline():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    first = cluster.candidate("b")
    second = cluster.candidate("c")
    await cluster.settle()
    crash(leader)
    deadline = leader.lease.deadline
    await cluster.until(first.done, within=LEASE + 1)
    assert cluster.clock.now_ms() >= deadline
    assert not second.done()
    second.cancel()


async def test_the_second_challenger_takes_over_only_if_the_first_is_gone_too():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    first = cluster.candidate("b")
    second = cluster.candidate("c")
    await cluster.settle()
    first.cancel()  # b registered, then died before the leader did
    crash(leader)
    await cluster.until(second.done, within=LEASE + STAGGER + 1)
    assert cluster.clock.now_ms() >= leader.lease.deadline + round(STAGGER * 1000)
    assert second.result().member == "c"


async def test_resign_hands_over_before_the_old_deadline():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    standby = cluster.candidate("b")
    await cluster.advance(0.1)
    old_deadline = leader.lease.deadline
    await leader.resign()
    await cluster.until(standby.done, within=LEASE)
    assert cluster.clock.now_ms() < old_deadline
    assert standby.result().member == "b"


async def test_right_after_resign_the_resigned_token_is_not_authoritative():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    await leader.resign()
    status = await describe_leadership(cluster.transport(), "billing")
    assert not status.authoritative(leader.token)


async def test_resign_deregisters_the_member_by_default():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    await leader.resign()
    state = await describe_role_state(cluster.transport(), "billing", cluster.partitions)
    assert state.roster == []
    assert state.lease is None


async def test_resign_can_keep_the_registration():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    await leader.resign(deregister=False)
    state = await describe_role_state(cluster.transport(), "billing", cluster.partitions)
    assert state.roster == ["a"]


async def test_resign_closes_done_without_an_error():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    await leader.resign()
    assert leader.done.done()
    assert leader.err is None


async def test_a_guarded_write_commits_while_leading():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    async with leader.transaction() as txn:
        await txn.send("out", b"invoice-1", partition=0)
    assert cluster.out_values() == [b"invoice-1"]


async def test_a_deposed_leader_cannot_commit_and_nothing_it_sent_is_visible():
    cluster = Cluster()
    zombie = await lead(cluster, "a")
    crash(zombie)  # paused: no renewals; its process still holds the producer
    successor = cluster.candidate("b")
    await cluster.until(successor.done, within=LEASE + 1)
    with pytest.raises(FencedError):
        async with zombie.transaction() as txn:
            await txn.send("out", b"zombie", partition=0)
    assert b"zombie" not in cluster.out_values()


async def test_a_leader_whose_clock_runs_behind_is_fenced_by_the_broker_not_its_clock():
    cluster = Cluster()
    slow = SkewedClock(cluster.clock, -10_000)  # its lease deadlines are already past
    zombie_process = MemoryTransport(cluster.broker, clock=slow)
    zombie = await lead(cluster, "a", clock=slow, transport=zombie_process)
    successor = cluster.candidate("b")
    await cluster.until(successor.done, within=1)
    assert not zombie.fenced()
    with pytest.raises(FencedError, match="superseded"):
        async with zombie.transaction() as txn:
            await txn.send("out", b"zombie", partition=0)
    assert zombie.done.done()
    assert isinstance(zombie.err, FencedError)
    assert b"zombie" not in cluster.out_values()


async def test_a_deposed_leaders_resign_leaves_no_tombstone():
    cluster = Cluster()
    zombie = await lead(cluster, "a")
    crash(zombie)
    successor = cluster.candidate("b")
    await cluster.until(successor.done, within=LEASE + 1)
    await zombie.resign(deregister=False)
    state = await describe_role_state(cluster.transport(), "billing", cluster.partitions)
    assert state.holder == "b"
    status = await describe_leadership(cluster.transport(), "billing")
    assert status.authoritative(successor.result().token)


async def test_bug_a_deposed_leaders_resign_fenced_its_successors_open_transaction():
    """Found by the real-process fault runs: the conditional bump of a
    superseded token aborted the successor's open transaction."""
    cluster = Cluster()
    zombie = await lead(cluster, "a")
    crash(zombie)
    successor_task = cluster.candidate("b")
    await cluster.until(successor_task.done, within=LEASE + 1)
    successor = successor_task.result()
    async with successor.transaction() as txn:
        await txn.send("out", b"successor", partition=0)
        await zombie.resign(deregister=False)
    assert b"successor" in cluster.out_values()
    assert not successor.done.done()


async def test_bug_a_leader_that_takes_back_its_own_lapsed_lease_deregisters_itself():
    """Found by the broker-restart fault run: the lapsed holder a new leader
    deregisters was its own member id, so it removed its fresh registration."""
    cluster = Cluster()
    first = await lead(cluster, "a")
    crash(first)
    again = cluster.candidate("a", transport=cluster.transport())  # a restarted process
    await cluster.until(again.done, within=LEASE + 1)
    await cluster.advance(0)
    state = await describe_role_state(cluster.transport(), "billing", cluster.partitions)
    assert state.holder == "a"
    assert state.roster == ["a"]


class LosingTransport(MemoryTransport):
    """A process whose epoch writer is gone once `lost` is set (a fatal producer)."""

    lost = False

    async def begin_transaction(self, role, token):
        if self.lost:
            raise EpochLostError("the producer is closed")
        return await super().begin_transaction(role, token)


async def test_a_lost_epoch_writer_ends_the_tenure_at_the_next_renewal_not_the_fence_deadline():
    cluster = Cluster()
    transport = LosingTransport(cluster.broker)
    leader = await lead(cluster, "a", transport=transport)
    transport.lost = True
    await cluster.until(leader.done.done, within=RENEW + 0.1)
    assert isinstance(leader.err, EpochLostError)
    assert cluster.clock.now_ms() < leader.fence_deadline


async def test_a_lost_epoch_writer_ends_the_tenure_when_a_transaction_begins():
    cluster = Cluster()
    transport = LosingTransport(cluster.broker)
    leader = await lead(cluster, "a", transport=transport)
    transport.lost = True
    with pytest.raises(EpochLostError):
        async with leader.transaction() as txn:
            await txn.send("out", b"x", partition=0)
    assert leader.done.done()
    assert isinstance(leader.err, EpochLostError)


class FirstLeaseFailsTransport(MemoryTransport):
    """A challenger whose first lease's commit fails fatally, once; with a
    `rival` set, another process mints the role's next epoch just before."""

    rival: MemoryTransport | None = None
    failed = False

    async def begin_transaction(self, role, token):
        txn = await super().begin_transaction(role, token)
        if self.failed:
            return txn

        async def commit():
            self.failed = True
            if self.rival is not None:
                await self.rival.acquire_epoch(role, LEASE)
            raise EpochLostError("the commit: the producer failed fatally")

        txn.commit = commit
        return txn


async def test_a_first_lease_that_fails_while_a_rival_fences_it_is_a_lost_challenge():
    cluster = Cluster()
    crash(await lead(cluster, "a"))
    transport = FirstLeaseFailsTransport(cluster.broker)
    transport.rival = cluster.transport()
    standby = cluster.candidate("b", transport=transport)
    await cluster.until(lambda: transport.failed, within=LEASE * 2)
    await cluster.until(standby.done, within=LEASE * 10)
    leader = standby.result()  # it went on standing, and took the role later
    status = await describe_leadership(cluster.transport(), "billing")
    assert status.authoritative(leader.token)
    assert leader.member == "b"


async def test_a_first_lease_that_fails_fatally_with_its_epoch_still_current_raises():
    cluster = Cluster()
    crash(await lead(cluster, "a"))
    transport = FirstLeaseFailsTransport(cluster.broker)
    standby = cluster.candidate("b", transport=transport)
    await cluster.until(standby.done, within=LEASE * 2)
    with pytest.raises(EpochLostError):
        standby.result()


async def test_entering_a_transaction_after_the_fence_deadline_raises_fenced_error():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    crash(leader)
    await cluster.advance((leader.fence_deadline - cluster.clock.now_ms()) / 1000)
    assert leader.fenced()
    with pytest.raises(FencedError):
        async with leader.transaction():
            pass


class FlakyTransport(MemoryTransport):
    """A client whose lease writes fail while `down` is set, as when cut off."""

    down = False

    async def begin_transaction(self, role, token):
        txn = await super().begin_transaction(role, token)
        write = txn.write_lease

        async def write_lease(partition, key, value):
            if self.down:
                raise TransportError("broker unreachable")
            return await write(partition, key, value)

        txn.write_lease = write_lease
        return txn


async def test_renewal_failures_are_retried_and_a_recovery_keeps_the_tenure():
    cluster = Cluster()
    transport = FlakyTransport(cluster.broker)
    leader = await lead(cluster, "a", transport=transport)
    transport.down = True
    await cluster.advance(1.5)
    transport.down = False
    await cluster.advance(1.0)
    assert not leader.done.done()
    assert leader.fence_deadline > cluster.clock.now_ms()


async def test_a_leader_cut_off_until_the_fence_deadline_ends_its_tenure_as_fenced():
    cluster = Cluster()
    transport = FlakyTransport(cluster.broker)
    leader = await lead(cluster, "a", transport=transport)
    transport.down = True
    await cluster.until(leader.done.done, within=LEASE)
    assert cluster.clock.now_ms() == leader.fence_deadline
    assert isinstance(leader.err, FencedError)
    assert leader.fenced()


async def test_a_transaction_open_at_the_fence_deadline_raises_fenced_error_not_cancelled():
    cluster = Cluster()
    transport = FlakyTransport(cluster.broker)
    leader = await lead(cluster, "a", transport=transport)
    transport.down = True
    gate = asyncio.Event()

    async def slow_writer():
        async with leader.transaction() as txn:
            await txn.send("out", b"late", partition=0)
            await gate.wait()
            await txn.send("out", b"later", partition=0)

    writer = asyncio.create_task(slow_writer())
    await cluster.until(leader.done.done, within=LEASE)
    gate.set()
    with pytest.raises(FencedError):
        await writer
    assert cluster.out_values() == []


async def test_a_renewal_due_during_a_guarded_transaction_rides_inside_it():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    gate = asyncio.Event()

    async def writer():
        async with leader.transaction() as txn:
            await txn.send("out", b"x", partition=0)
            await gate.wait()

    task = asyncio.create_task(writer())
    await cluster.advance(1.2)  # the renewal fell due while the transaction is open
    before = leader.lease.granted_at
    gate.set()
    await cluster.settle()
    await task
    assert leader.lease.granted_at > before
    records = cluster.broker.partition(STATE_TOPIC, leader.partition).entries
    txn_of_out = cluster.broker.partition("out", 0).entries[0].transaction
    assert any(e.transaction is txn_of_out and e.value for e in records)


async def test_simultaneous_challenges_leave_exactly_one_leader():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    standbys = [cluster.candidate(m, challenge_stagger=0.0) for m in ("b", "c", "d")]
    await cluster.settle()
    crash(leader)
    minted_before = cluster.broker.epochs_minted
    await cluster.until(lambda: any(t.done() for t in standbys), within=LEASE + 1)
    await cluster.advance(LEASE)
    leading = [t.result() for t in standbys if t.done() and not t.result().done.done()]
    assert len(leading) == 1
    status = await describe_leadership(cluster.transport(), "billing")
    assert status.authoritative(leading[0].token)
    assert cluster.broker.epochs_minted - minted_before <= len(standbys) + 1
    for task in standbys:
        task.cancel()


async def test_a_loser_backs_off_instead_of_fencing_the_winner():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    standbys = [cluster.candidate(m, challenge_stagger=0.0) for m in ("b", "c")]
    await cluster.settle()
    crash(leader)
    await cluster.until(lambda: any(t.done() for t in standbys), within=LEASE + 1)
    winner = next(t.result() for t in standbys if t.done())
    await cluster.advance(LEASE * 4)
    assert not winner.done.done()
    for task in standbys:
        task.cancel()


async def test_a_re_registered_member_goes_to_the_tail_and_does_not_fail_back():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    b = cluster.candidate("b")
    c = cluster.candidate("c")
    await cluster.settle()
    crash(leader)
    await cluster.until(b.done, within=LEASE + 1)
    returning = cluster.candidate("a")  # the old leader's process restarts
    await cluster.settle()
    state = await describe_role_state(cluster.transport(), "billing", cluster.partitions)
    assert state.roster == ["b", "c", "a"]
    crash(b.result())
    await cluster.until(c.done, within=LEASE + 1)
    assert not returning.done()
    returning.cancel()


async def test_a_standby_holds_its_challenge_while_an_open_transaction_hides_the_partition():
    cluster = Cluster(partitions=1)  # both roles share the only partition
    other = await lead(cluster, "x", role="reports")
    leader = await lead(cluster, "a")
    standby = cluster.candidate("b")
    await cluster.settle()
    # The other role's holder dies inside a lease transaction.
    crash(other)
    txn = await other._transport.begin_transaction("reports", other.token)
    await txn.write_lease(0, b"\x00\x01\x00\x07reports\x00\x00", b"")
    await cluster.advance(LEASE * 3)
    assert not standby.done()
    assert not leader.done.done()
    status = await describe_leadership(cluster.transport(), "billing")
    assert status.authoritative(leader.token)
    standby.cancel()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"partitions": 0}, "partitions"),
        ({"lease_duration": 0}, "lease_duration"),
        ({"renew_interval": 0}, "renew_interval"),
        ({"challenge_stagger": -1}, "challenge_stagger"),
        ({"lease_duration": 3, "renew_interval": 2.5}, "shorter than lease_duration"),
    ],
)
def test_invalid_options_are_refused_with_a_clear_message(options, message):
    with pytest.raises(ValueError, match=message):
        LeadershipOptions(**options)


def test_the_fence_margin_is_five_seconds_or_a_third_of_the_lease():
    assert LeadershipOptions(lease_duration=30, renew_interval=10).fence_margin == 5
    assert LeadershipOptions(lease_duration=3, renew_interval=1).fence_margin == 1


@pytest.mark.parametrize(
    ("role", "member", "message"),
    [("", "m", "role must not be empty"), ("r", "", "member must not be empty"),
     ("r" * 32768, "m", "over the limit"),
     ("r\udcff", "m", "role is not encodable as UTF-8"),
     ("r", "m\ud800", "member is not encodable as UTF-8")],
)
async def test_bad_names_are_refused_before_any_io(role, member, message):
    class NoIO:
        def __getattr__(self, name):
            raise AssertionError(f"I/O attempted: {name}")

    with pytest.raises(ValueError, match=message):
        await acquire_leadership(NoIO(), role, member)


async def test_a_wrong_partition_count_stops_start_up():
    cluster = Cluster(partitions=4)
    with pytest.raises(StateTopicError,
                       match="has 4 partitions, but this member is configured with partitions=16"):
        await acquire_leadership(cluster.transport(), "billing", "a", partitions=16)


async def test_a_partition_count_changed_while_leading_ends_the_tenure():
    cluster = Cluster(partitions=4)
    leader = await lead(cluster, "a")
    cluster.broker.add_partitions(STATE_TOPIC, 1)
    await cluster.until(leader.done.done, within=61)
    assert isinstance(leader.err, StateTopicError)


async def test_cancelling_a_writer_that_waits_for_the_lock_does_not_wedge_resign():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    gate = asyncio.Event()

    async def holder():
        async with leader.transaction():
            await gate.wait()

    async def waiter():
        async with leader.transaction():
            pass

    holding = asyncio.create_task(holder())
    await cluster.settle()
    waiting = asyncio.create_task(waiter())
    await cluster.settle()
    waiting.cancel()
    await cluster.settle()
    gate.set()
    await holding
    await asyncio.wait_for(leader.resign(), timeout=5)
    assert leader.err is None


class SlowBeginTransport(MemoryTransport):
    """Opens transactions on the broker, then takes one more round trip to answer."""

    async def begin_transaction(self, role, token):
        txn = await super().begin_transaction(role, token)
        await run_ready_callbacks(1)  # one more round trip to the broker
        return txn


async def test_a_writer_cancelled_while_its_transaction_opens_leaves_none_open():
    cluster = Cluster()
    leader = await lead(cluster, "a", transport=SlowBeginTransport(cluster.broker))

    async def writer():
        async with leader.transaction() as txn:
            await txn.send("out", b"x", partition=0)

    for rounds in range(6):
        task = asyncio.create_task(writer())
        await run_ready_callbacks(rounds)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    await asyncio.wait_for(leader.resign(), timeout=5)
    assert leader.err is None
    state = await describe_role_state(cluster.transport(), "billing", cluster.partitions)
    assert state.lease is None


async def test_a_new_leader_deregisters_the_lapsed_holder_and_members_whose_slots_passed():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    dead = cluster.candidate("b")
    standby = cluster.candidate("c")
    await cluster.settle()
    dead.cancel()  # b crashed while waiting, its registration still ranked first
    crash(leader)
    await cluster.until(standby.done, within=LEASE + 2)
    state = await describe_role_state(cluster.transport(), "billing", cluster.partitions)
    assert state.roster == ["c"]


async def test_a_holder_that_resigned_keeping_its_registration_stays_a_candidate():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    standby = cluster.candidate("b")
    await cluster.settle()
    await leader.resign(deregister=False)
    await cluster.until(standby.done, within=LEASE)
    state = await describe_role_state(cluster.transport(), "billing", cluster.partitions)
    assert state.roster == ["a", "b"]


async def test_a_passed_over_member_that_is_alive_registers_again_at_the_tail():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    slow = cluster.candidate("b")
    standby = cluster.candidate("c")
    await cluster.settle()
    crash(leader)
    await cluster.until(slow.done, within=LEASE + 2)
    crash(slow.result())
    await cluster.until(standby.done, within=LEASE + 2)
    revived = cluster.candidate("b")
    await cluster.advance(0.1)
    state = await describe_role_state(cluster.transport(), "billing", cluster.partitions)
    assert state.roster[-1] == "b"
    revived.cancel()

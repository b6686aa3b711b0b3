"""A tenure's whole lifecycle on the in-process model, with time driven by hand.

What these pin down: the role's function has stopped before a successor can
start; a cancelled acquisition leaves no leader behind; the fence deadline is
kept on the monotonic clock whatever the wall clock does; a guarded commit
never holds its caller past the end of the tenure; a late call of an old
tenure cannot touch a newer one; a standby's hold over a hidden tail covers
the broker's abort latency; a loser backs off; and resign() keeps its errors,
always closes the producer and refuses to wait for itself.
"""

from __future__ import annotations

import asyncio

import pytest

from krabka import (
    FencedError,
    InvalidStateError,
    Kind,
    LeaderRunner,
    Leadership,
    LeadershipOptions,
    Lease,
    OutcomeUnknownError,
    RunnerObserver,
    TenureState,
    TransportError,
    acquire_leadership,
    decode_key,
    describe_leadership,
    describe_role_state,
    encode_key,
    encode_lease,
    lease_key,
    role_partition,
)
from krabka.testing import ManualClock, MemoryBroker, MemoryTransport
from tests.support.loop import run_ready_callbacks
from tests.support.sim import LEASE, RENEW, STAGGER, STATE, Cluster, crash

ROLE = "billing"
OPTIONS = LeadershipOptions(partitions=4, lease_duration=LEASE, renew_interval=RENEW,
                            challenge_stagger=STAGGER)


async def lead(cluster: Cluster, member: str, **kw) -> Leadership:
    task = cluster.candidate(member, **kw)
    await cluster.until(task.done, within=1)
    return task.result()


async def sleep_ms(clock, ms: int) -> None:
    await clock.sleep_until_monotonic(clock.monotonic_ms() + ms)


class SlowTransport(MemoryTransport):
    """A client whose calls take clock time: `delays` maps a call name to ms."""

    def __init__(self, broker: MemoryBroker, **delays: int) -> None:
        super().__init__(broker)
        self.delays = delays

    async def _delay(self, name: str) -> None:
        if self.delays.get(name):
            await sleep_ms(self.clock, self.delays[name])

    async def acquire_epoch(self, role, transaction_timeout, current=None):
        await self._delay("acquire_epoch")
        return await super().acquire_epoch(role, transaction_timeout, current)

    async def begin_transaction(self, role, token):
        await self._delay("begin_transaction")
        return await super().begin_transaction(role, token)

    async def release(self, role, token):
        await self._delay("release")
        await super().release(role, token)


# The function stops before anyone else can start.


class Intervals:
    """Role functions that record, in order, when each starts and stops."""

    def __init__(self) -> None:
        self.running: set[str] = set()
        self.overlaps: list[tuple[str, set[str]]] = []
        self.starts = 0

    def function(self, member: str):
        async def work(leadership: Leadership) -> None:
            if self.running:
                self.overlaps.append((member, set(self.running)))
            self.running.add(member)
            self.starts += 1
            try:
                await asyncio.Event().wait()
            finally:
                self.running.discard(member)
        return work


async def test_a_tenure_that_fenced_one_just_begun_runs_its_function_only_after_that_ones():
    """Rank 0 takes longer than one stagger from its slot to its first lease;
    rank 1, which read the partition before that lease, mints the newer epoch
    and fences a tenure that has just begun. That tenure's function runs
    until its next renewal is refused, so the newer one starts its function
    only at the superseded lease's fence deadline."""
    cluster = Cluster()
    intervals = Intervals()

    def start(member: str, mint_delay_ms: int) -> LeaderRunner:
        transport = SlowTransport(cluster.broker, acquire_epoch=mint_delay_ms)
        runner = LeaderRunner(transport, ROLE, member, intervals.function(member),
                              options=OPTIONS, clock=cluster.clock, stop_timeout=1.0)
        runner.start()
        return runner

    # a's slot is its registration; b's one stagger (500 ms) later.
    runners = {"a": start("a", 600), "b": start("b", 200)}
    try:
        await cluster.advance(LEASE * 2)
        assert runners["b"].running
        assert not runners["a"].running
        assert intervals.starts == 2  # a led first, b fenced it: the race happened
        assert intervals.overlaps == []
    finally:
        await cluster.stop_runners(*runners.values())


async def test_a_clean_handover_never_runs_two_role_functions_at_once():
    cluster = Cluster()
    intervals = Intervals()

    def start(member: str) -> LeaderRunner:
        # A producer close that takes 50 ms: the old order (resign, then
        # cancel) kept the old function running while the successor started.
        transport = SlowTransport(cluster.broker, release=50)
        runner = LeaderRunner(transport, ROLE, member, intervals.function(member),
                              options=OPTIONS, clock=cluster.clock, stop_timeout=1.0)
        runner.start()
        return runner

    runners = {"a": start("a")}
    try:
        await cluster.until(lambda: runners["a"].running, within=2)
        runners["b"] = start("b")
        await cluster.advance(0.5)
        for handover in range(10):
            leader = next(m for m, r in runners.items() if r.running)
            other = "b" if leader == "a" else "a"
            stopping = asyncio.create_task(runners[leader].stop(deregister=False))
            await cluster.until(lambda other=other: runners[other].running, within=LEASE,
                                step_ms=5)
            await cluster.until(stopping.done, within=5, step_ms=5)
            runners[leader] = start(leader)
            await cluster.advance(0.5)
            assert intervals.starts == handover + 2
        assert intervals.overlaps == []
    finally:
        await cluster.stop_runners(*runners.values())


# A cancelled acquisition leaves nothing behind.


async def test_cancelling_an_acquisition_at_any_await_point_leaves_no_leader():
    outcomes = set()
    for rounds in range(0, 60):
        cluster = Cluster()
        transport = cluster.transport()
        before = set(asyncio.all_tasks())
        acquiring = cluster.candidate("a", transport=transport)
        await run_ready_callbacks(rounds)
        acquiring.cancel()
        await asyncio.gather(acquiring, return_exceptions=True)
        await cluster.settle()
        won = acquiring.done() and not acquiring.cancelled()
        if won:
            leadership = acquiring.result()
            outcomes.add("won")
            await leadership.resign()
            continue
        outcomes.add("minted" if cluster.broker.epochs_minted else "before the epoch")
        await cluster.advance(LEASE * 5)
        state = await describe_role_state(cluster.transport(), ROLE, cluster.partitions)
        assert state.lease is None, (rounds, state.lease)
        assert transport._producers == {}, rounds
        status = await describe_leadership(cluster.transport(), ROLE)
        assert status.state != "Ongoing", rounds
        left = {t for t in asyncio.all_tasks() - before if not t.done()}
        assert left == set(), (rounds, left)
    # The sweep reached every stage, including cancellation after the epoch was minted.
    assert outcomes == {"before the epoch", "minted", "won"}


async def test_a_runner_stopped_while_campaigning_leaves_no_leader():
    cluster = Cluster()
    intervals = Intervals()
    for rounds in range(0, 40, 3):
        transport = cluster.transport()
        runner = LeaderRunner(transport, ROLE, "a", intervals.function("a"), options=OPTIONS,
                              clock=cluster.clock)
        task = runner.start()
        await run_ready_callbacks(rounds)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await cluster.settle()
        state = await describe_role_state(cluster.transport(), ROLE, cluster.partitions)
        assert state.lease is None, rounds
        assert transport._producers == {}, rounds
        assert intervals.running == set()


async def test_a_function_that_waits_for_its_tenure_to_end_is_stopped_cleanly():
    cluster = Cluster()
    waited: list[Leadership] = []

    async def wait_for_the_end(leadership: Leadership) -> None:
        waited.append(leadership)
        await leadership.done  # the runner cancels this wait at the end of the tenure

    runner = LeaderRunner(cluster.transport(), ROLE, "a", wait_for_the_end, options=OPTIONS,
                          clock=cluster.clock)
    runner.start()
    await cluster.until(lambda: runner.running, within=1)
    await cluster.stop_runners(runner)
    (leadership,) = waited
    assert leadership.state is TenureState.ENDED
    assert leadership.err is None
    assert leadership.done.done()
    assert not leadership.done.cancelled()
    assert runner.last_stop is not None
    assert runner.last_stop.reason == "stopped"


# Local deadlines run on the monotonic clock.


class CutTransport(MemoryTransport):
    """A process whose link to the broker can be cut: transactions then fail."""

    cut = False

    async def begin_transaction(self, role, token):
        if self.cut:
            raise TransportError("broker unreachable")
        return await super().begin_transaction(role, token)


async def test_a_wall_clock_stepped_back_does_not_extend_the_fence_deadline():
    cluster = Cluster()
    transport = CutTransport(cluster.broker)
    leadership = await lead(cluster, "a", transport=transport)
    await cluster.advance(RENEW * 2)
    deadline = leadership.fence_deadline_monotonic
    transport.cut = True
    cluster.clock.step_wall(-10)  # NTP steps this process's wall clock back 10 s
    await cluster.until(leadership.done.done, within=LEASE * 5, step_ms=5)
    assert deadline <= cluster.clock.monotonic_ms() <= deadline + 5
    assert isinstance(leadership.err, FencedError)
    assert "fence deadline" in str(leadership.err)


async def test_a_wall_clock_stepped_forward_does_not_shorten_the_fence_deadline():
    cluster = Cluster()
    leadership = await lead(cluster, "a")
    cluster.clock.step_wall(+10)
    await cluster.advance(RENEW * 3)
    assert not leadership.fenced()
    assert leadership.remaining() > 0
    await leadership.resign()


async def test_the_runner_stops_the_function_at_the_monotonic_fence_deadline():
    cluster = Cluster()
    transport = CutTransport(cluster.broker)
    intervals = Intervals()
    runner = LeaderRunner(transport, ROLE, "a", intervals.function("a"), options=OPTIONS,
                          clock=cluster.clock)
    runner.start()
    await cluster.until(lambda: runner.running, within=2)
    leadership = runner.leadership
    assert leadership is not None
    deadline = leadership.fence_deadline_monotonic
    transport.cut = True
    cluster.clock.step_wall(-10)
    try:
        await cluster.until(lambda: not runner.running, within=LEASE * 5, step_ms=5)
        assert cluster.clock.monotonic_ms() <= deadline + 5
        assert runner.last_stop is not None
        assert runner.last_stop.reason == "fenced"
    finally:
        transport.cut = False
        await cluster.stop_runners(runner)


# A win whose tenure is already over runs nothing.


class SlowFirstTransaction(MemoryTransport):
    """A client whose first transaction (the first lease's) opens `delay_ms`
    of clock time after it is asked for: a broker outage that ends while the
    request waits."""

    def __init__(self, broker: MemoryBroker, delay_ms: int) -> None:
        super().__init__(broker)
        self.delay_ms = delay_ms

    async def begin_transaction(self, role, token):
        delay, self.delay_ms = self.delay_ms, 0
        await sleep_ms(self.clock, delay)
        return await super().begin_transaction(role, token)


LATE_MS = OPTIONS.lease_ms - OPTIONS.margin_ms + 500
"""Past the fence deadline a first lease sent at once would have."""


async def test_a_first_lease_committed_after_its_fence_deadline_is_handed_back_and_taken_anew():
    cluster = Cluster()
    task = cluster.candidate("a", transport=SlowFirstTransaction(cluster.broker, LATE_MS))
    await cluster.until(task.done, within=LEASE * 2)
    leadership = task.result()
    assert not leadership.fenced()
    assert leadership.remaining() > 0
    assert cluster.broker.epochs_minted == 2
    await leadership.resign()


async def test_a_runner_whose_first_lease_commits_late_runs_no_function_in_that_tenure():
    cluster = Cluster()

    class Elected(RunnerObserver):
        def __init__(self) -> None:
            self.tokens: list[str] = []

        def elected(self, role: str, leadership: Leadership) -> None:
            self.tokens.append(str(leadership.token))

    observer = Elected()
    started: list[bool] = []

    async def work(leadership: Leadership) -> None:
        started.append(leadership.fenced())
        await asyncio.Event().wait()

    runner = LeaderRunner(SlowFirstTransaction(cluster.broker, LATE_MS), ROLE, "a", work,
                          options=OPTIONS, clock=cluster.clock, observer=observer)
    runner.start()
    try:
        await cluster.until(lambda: runner.running, within=LEASE * 4)
    finally:
        await cluster.stop_runners(runner)
    assert started == [False]
    assert len(observer.tokens) == 1


# A guarded commit is bounded by the end of the tenure.


class HangingCommitTransport(MemoryTransport):
    """Once `hang` is set, commits of transactions that sent a record are sent
    but never answered (a renewal's transaction, which only writes its lease,
    still commits)."""

    hang = False

    async def begin_transaction(self, role, token):
        txn = await super().begin_transaction(role, token)
        if not self.hang:
            return txn

        class Hanging:
            write_lease = txn.write_lease
            abort = txn.abort
            abandon = txn.abandon
            sent = False

            async def send(self, *args, **kwargs) -> None:
                self.sent = True
                await txn.send(*args, **kwargs)

            async def commit(self) -> None:
                if self.sent:
                    await asyncio.Event().wait()
                await txn.commit()

        return Hanging()


async def test_a_commit_unanswered_at_the_end_of_the_tenure_raises_outcome_unknown():
    cluster = Cluster()
    transport = HangingCommitTransport(cluster.broker)
    leadership = await lead(cluster, "a", transport=transport)
    # Renewals still commit; only the guarded transaction's commit hangs.
    transport.hang = True

    async def write() -> None:
        async with leadership.transaction() as txn:
            await txn.send("out", b"x", partition=0)

    writing = asyncio.create_task(write())
    await cluster.until(writing.done, within=LEASE * 3, step_ms=5)
    limit = leadership.fence_deadline_monotonic + leadership.options.margin_ms
    assert isinstance(writing.exception(), OutcomeUnknownError)
    assert limit <= cluster.clock.monotonic_ms() <= limit + 5
    assert leadership.done.done()  # the tenure itself ended at its fence deadline


# A resignation never fences the successor it makes way for.


class SuccessorAtCall(MemoryTransport):
    """A resigning leader's client; at its `k`-th call made after the role's lease
    is seen cleared, a successor (its own client) mints an epoch and opens its
    first-lease transaction before the call goes on. That is the fastest a
    standby can be: it needs only to see the tombstone."""

    def __init__(self, cluster: Cluster, k: int) -> None:
        super().__init__(cluster.broker)
        self.cluster = cluster
        self.k = k
        self.calls_since_cleared = 0
        self.successor = cluster.transport()
        self.opened: tuple[object, object] | None = None

    async def _before_call(self) -> None:
        if self.opened is not None:
            return
        partition = role_partition(ROLE, self.cluster.partitions)
        records = self.broker.partition(STATE, partition).read_committed(0).records
        if not any(r.key == encode_key(lease_key(ROLE)) and r.value is None for r in records):
            return
        if self.calls_since_cleared == self.k:
            token = await self.successor.acquire_epoch(ROLE, LEASE)
            txn = await self.successor.begin_transaction(ROLE, token)
            lease = Lease("b", token.producer_id, token.producer_epoch, 0, 10**12)
            await txn.write_lease(partition, encode_key(lease_key(ROLE)), encode_lease(lease))
            self.opened = (token, txn)
        self.calls_since_cleared += 1

    async def describe_epoch(self, role):
        await self._before_call()
        return await super().describe_epoch(role)

    async def acquire_epoch(self, role, transaction_timeout, current=None):
        await self._before_call()
        return await super().acquire_epoch(role, transaction_timeout, current)

    async def begin_transaction(self, role, token):
        await self._before_call()
        return await super().begin_transaction(role, token)

    async def release(self, role, token):
        await self._before_call()
        await super().release(role, token)

    async def append(self, partition, key, value):
        await self._before_call()
        return await super().append(partition, key, value)


@pytest.mark.parametrize("k", range(4))
async def test_a_resign_never_fences_a_successor_that_starts_once_the_lease_is_cleared(k):
    cluster = Cluster()
    transport = SuccessorAtCall(cluster, k)
    leadership = await lead(cluster, "a", transport=transport)
    await leadership.resign()
    if transport.opened is None:  # k is past the resign's last call: the successor comes after
        transport.k = transport.calls_since_cleared
        await transport._before_call()
    assert transport.opened is not None
    token, txn = transport.opened
    await txn.commit()  # FencedError if the resign's epoch bump aborted it
    status = await describe_leadership(cluster.transport(), ROLE)
    assert status.authoritative(token)
    assert not status.authoritative(leadership.token)


# A resignation after the fence deadline still clears the lease.


async def test_a_resign_after_a_transaction_was_cut_off_at_the_fence_deadline_clears_the_lease():
    """The function held a guarded transaction open past the fence deadline
    (its renewal waited for it), so the tenure ended and no abort was sent;
    the resignation aborts that transaction and still writes the tombstone,
    so a standby need not wait for the lease to lapse."""
    cluster = Cluster()
    leadership = await lead(cluster, "a")

    async def hold_a_transaction_open() -> None:
        async with leadership.transaction() as txn:
            await txn.send("out", b"cut off", partition=0)
            await asyncio.Event().wait()

    holding = asyncio.ensure_future(hold_a_transaction_open())
    await cluster.until(leadership.done.done, within=LEASE)
    holding.cancel()
    await asyncio.gather(holding, return_exceptions=True)
    await leadership.resign()
    state = await describe_role_state(cluster.transport(), ROLE, cluster.partitions)
    assert state.lease is None
    assert cluster.out_values() == []


# A late call of an old tenure cannot touch a newer tenure on the same transport.


async def test_a_late_resign_of_an_old_tenure_leaves_the_newer_tenure_alone():
    cluster = Cluster()
    transport = cluster.transport()
    old = await lead(cluster, "a", transport=transport)
    crash(old)  # it stops renewing; the object lives on
    await cluster.advance(LEASE + 0.1)
    new = await lead(cluster, "a", transport=transport)
    assert new.token != old.token
    await old.resign(deregister=False)
    await cluster.advance(LEASE * 3)
    assert not new.done.done(), new.err
    state = await describe_role_state(cluster.transport(), ROLE, cluster.partitions)
    assert state.lease is not None
    assert state.lease.producer_epoch == new.token.producer_epoch
    assert (await describe_leadership(cluster.transport(), ROLE)).authoritative(new.token)
    await new.resign()


# The hold over a hidden tail covers the broker's abort latency.


async def test_a_standby_holds_while_the_broker_has_not_yet_aborted_a_dead_holders_transaction():
    clock = ManualClock()
    # The coordinator aborts timed-out transactions only every 10 s (Kafka's
    # default transaction.abort.timed.out.transaction.cleanup.interval.ms), so
    # the tail stays hidden for up to a lease plus 10 s.
    broker = MemoryBroker(clock=clock, abort_cleanup_interval=10.0)
    broker.create_topic(STATE, 1)  # both roles share the only partition
    cluster = Cluster(partitions=1)
    cluster.clock, cluster.broker = clock, broker
    other = await lead(cluster, "x", role="reports")
    leader = await lead(cluster, "a")
    standby = cluster.candidate("b")
    await cluster.settle()
    crash(other)  # the other role's holder dies inside a transaction
    txn = await other._transport.begin_transaction("reports", other.token)
    await txn.write_lease(0, encode_key(lease_key("reports")), None)  # now the tail is hidden
    await cluster.advance(LEASE * 6)
    assert not standby.done()
    assert not leader.done.done(), leader.err
    assert broker.describe(ROLE).token == leader.token  # nobody challenged the healthy leader
    assert (await describe_leadership(cluster.transport(), ROLE)).authoritative(leader.token)
    standby.cancel()


# A loser backs off.


async def test_a_loser_whose_reread_precedes_the_winners_first_lease_backs_off():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    # b mints first but writes its first lease late enough for c's epoch to
    # fence it; c mints second and writes its first lease a long while later,
    # so b re-reads the partition before c's lease exists.
    b = cluster.candidate("b", transport=SlowTransport(cluster.broker, begin_transaction=20),
                          challenge_stagger=0.0)
    c = cluster.candidate("c", transport=SlowTransport(cluster.broker, acquire_epoch=10,
                                                       begin_transaction=400),
                          challenge_stagger=0.0)
    await cluster.settle()
    crash(leader)
    minted = cluster.broker.epochs_minted
    await cluster.until(c.done, within=LEASE * 2, step_ms=5)
    winner = c.result()
    await cluster.advance(LEASE * 4)
    assert cluster.broker.epochs_minted - minted == 2  # b's and c's: no third epoch
    assert not b.done()
    assert not winner.done.done(), winner.err
    assert (await describe_leadership(cluster.transport(), ROLE)).authoritative(winner.token)
    b.cancel()


# resign().


async def test_fenced_is_true_from_the_moment_a_resignation_begins():
    cluster = Cluster()
    leadership = await lead(cluster, "a")
    release = asyncio.Event()

    async def write() -> None:
        async with leadership.transaction() as txn:
            await txn.send("out", b"last", partition=0)
            await release.wait()

    writing = asyncio.create_task(write())
    await cluster.settle()
    resigning = asyncio.create_task(leadership.resign())
    await cluster.settle()
    assert leadership.state is TenureState.RESIGNING
    assert leadership.fenced()
    assert not resigning.done()  # it waits for the open transaction
    with pytest.raises(FencedError):
        async with leadership.transaction():
            pass
    release.set()
    await cluster.until(resigning.done, within=1)
    assert writing.exception() is None
    assert leadership.state is TenureState.ENDED
    assert leadership.err is None


class FailingTransport(MemoryTransport):
    """Calls named in `failing` raise a transport error (not a fence)."""

    def __init__(self, broker: MemoryBroker, *failing: str) -> None:
        super().__init__(broker)
        self.failing = set(failing)
        self.released: list[object] = []

    def _maybe_fail(self, name: str) -> None:
        if name in self.failing:
            raise TransportError(f"{name}: broker unreachable")

    async def begin_transaction(self, role, token):
        txn = await super().begin_transaction(role, token)
        write = txn.write_lease

        async def write_lease(partition, key, value):
            if value is None and decode_key(key).kind is Kind.LEASE:
                self._maybe_fail("tombstone")
            return await write(partition, key, value)

        txn.write_lease = write_lease
        return txn

    async def append(self, partition, key, value):
        if value is None:
            self._maybe_fail("deregister")
        return await super().append(partition, key, value)

    async def acquire_epoch(self, role, transaction_timeout, current=None):
        if current is not None:
            self._maybe_fail("retire")
        return await super().acquire_epoch(role, transaction_timeout, current)

    async def release(self, role, token):
        self.released.append(token)
        await super().release(role, token)


@pytest.mark.parametrize("failing", ["retire", "tombstone", "deregister"])
async def test_resign_keeps_the_error_it_met_and_always_closes_the_producer(failing):
    cluster = Cluster()
    transport = FailingTransport(cluster.broker, failing)
    leadership = await lead(cluster, "a", transport=transport)
    await leadership.resign()
    assert isinstance(leadership.err, TransportError)
    assert failing in str(leadership.err)
    assert len(transport.released) == 1  # under the bumped epoch, unless the bump failed
    assert transport._producers == {}
    # Every other step was still tried: the lease is cleared unless its own step failed.
    state = await describe_role_state(cluster.transport(), ROLE, cluster.partitions)
    assert (state.lease is None) == (failing != "tombstone")
    # The token stops speaking for the role unless its retirement was the step that
    # failed; then it does until a successor's InitProducerId supersedes it.
    status = await describe_leadership(cluster.transport(), ROLE)
    assert status.authoritative(leadership.token) == (failing == "retire")


async def test_resign_inside_the_same_tenures_transaction_is_refused():
    cluster = Cluster()
    leadership = await lead(cluster, "a")
    refused: list[BaseException] = []
    async with leadership.transaction() as txn:
        await txn.send("out", b"x", partition=0)
        try:
            await asyncio.wait_for(leadership.resign(), timeout=1)
        except InvalidStateError as exc:
            refused.append(exc)
    assert len(refused) == 1
    assert "inside this tenure's transaction" in str(refused[0])
    assert cluster.out_values() == [b"x"]  # the transaction itself still committed
    assert leadership.state is TenureState.LEADING
    await asyncio.wait_for(leadership.resign(), timeout=5)
    assert leadership.err is None


# Deregistrations of passed-over members are fenced with the first lease.


async def test_passed_over_members_are_deregistered_in_the_first_lease_transaction():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    dead = cluster.candidate("b")
    await cluster.settle()
    dead.cancel()  # b registered, then died while waiting
    c = cluster.candidate("c")
    await cluster.settle()
    crash(leader)
    await cluster.until(c.done, within=LEASE * 3)
    winner = c.result()
    state = await describe_role_state(cluster.transport(), ROLE, cluster.partitions)
    assert state.roster == ["c"]
    entries = cluster.broker.partition(STATE, winner.partition).entries
    first_lease = next(e for e in entries if e.offset == winner.tenure)
    tombstones = [e for e in entries if e.offset > winner.tenure and e.value is None
                  and not e.control]
    assert len(tombstones) == 2  # a (lapsed) and b (passed over)
    assert all(e.transaction is first_lease.transaction for e in tombstones)
    await winner.resign()


async def test_a_winner_fenced_before_its_first_lease_commits_deregisters_nobody():
    cluster = Cluster()
    leader = await lead(cluster, "a")
    c = cluster.candidate("c", transport=SlowTransport(cluster.broker, acquire_epoch=10),
                          challenge_stagger=0.0)
    await cluster.settle()
    b = cluster.candidate("b", transport=SlowTransport(cluster.broker, begin_transaction=20),
                          challenge_stagger=0.0)
    await cluster.settle()
    crash(leader)
    # b mints first and, in its view, passes over c; c mints second, fencing
    # b's first lease and, with it, b's deregistration of c.
    await cluster.until(c.done, within=LEASE * 2, step_ms=5)
    state = await describe_role_state(cluster.transport(), ROLE, cluster.partitions)
    assert state.roster == ["c", "b"]
    assert state.holder == "c"
    b.cancel()
    resigning = asyncio.create_task(c.result().resign())
    await cluster.until(resigning.done, within=1)


async def test_acquire_leadership_takes_options_or_keywords_but_not_both():
    cluster = Cluster()
    with pytest.raises(ValueError, match="not both"):
        await acquire_leadership(cluster.transport(), ROLE, "a", options=OPTIONS,
                                 lease_duration=LEASE)


class UnreachableTransport(CutTransport):
    """Once cut, renewals fail and a transaction's abort never gets an answer."""

    async def begin_transaction(self, role, token):
        txn = await super().begin_transaction(role, token)
        transport = self

        class Stuck:
            send = txn.send
            write_lease = txn.write_lease
            commit = txn.commit
            abandon = txn.abandon

            async def abort(self) -> None:
                if transport.cut:
                    await asyncio.Event().wait()
                await txn.abort()

        return Stuck()


async def test_a_function_cut_off_inside_a_transaction_stops_at_the_fence_deadline():
    cluster = Cluster()
    transport = UnreachableTransport(cluster.broker)
    inside = asyncio.Event()

    async def writer(leadership: Leadership) -> None:
        async with leadership.transaction() as txn:
            await txn.send("out", b"x", partition=0)
            inside.set()
            await asyncio.Event().wait()

    runner = LeaderRunner(transport, ROLE, "a", writer, options=OPTIONS, clock=cluster.clock)
    runner.start()
    try:
        await cluster.until(inside.is_set, within=2)
        leadership = runner.leadership
        assert leadership is not None
        deadline = leadership.fence_deadline_monotonic
        transport.cut = True
        await cluster.until(lambda: not runner.running, within=LEASE * 3, step_ms=5)
        # The abort the broker would never answer is not waited for.
        assert cluster.clock.monotonic_ms() <= deadline + 5
        assert runner.last_stop is not None
        assert runner.last_stop.reason == "fenced"
    finally:
        transport.cut = False
        await cluster.stop_runners(runner)

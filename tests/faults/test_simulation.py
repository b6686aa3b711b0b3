"""Deterministic simulation: safety under random faults, seed by seed.

CI runs `CI_SEEDS` seeds of `CI_LEASES` lease durations each (about 20 s on
one core), and `TERM_CI_SEEDS` of the same seeds again in term mode (every
member with ``fencing="term"``; the figure is in docs/reliability.md). Each
seed also draws the library faults it runs with (`LibraryFaults`: observers
and admissions that raise, runner tasks cancelled, functions that ignore
cancellation, balanced placement over different role sets, in term mode
terms tails that fail, stall and lag); ``--faults``
names the kinds a run may draw (``--faults none`` for none). Each
failure message starts with the command that replays its seed and prints
its whole trace:

    python -m tests.faults.simulation --seed 1234 --leases 12
    python -m tests.faults.simulation --seed 1234 --leases 12 --fencing term

The long run (many thousands of seeds) is the same command outside CI:

    python -m tests.faults.simulation --seeds 5000

with --start (default 100000) and --leases (default 24) to move or
lengthen it. What the runs check, and why a livelock is the only liveness
failure, is in tests/faults/simulation.py; the figures are in docs/reliability.md.
"""

from __future__ import annotations

import asyncio
import functools
import gc
from collections import Counter

import pytest

from krabka import TERMS_TOPIC, FencedError, PartitionRead, TermKind, decode_term_key
from krabka.scale.heap import settle_heap
from krabka.testing import MemoryBroker, MemoryTransport
from krabka.testing.memory import MAX_EPOCH
from tests.faults.simulation import (
    LIBRARY_FAULTS,
    LIVELOCK_LEASES,
    TRANSACTION_CALLS,
    ZOMBIE_LEASES,
    SimConfig,
    SimReport,
    Simulation,
    run_seed,
)
from tests.support.sim import LEASE, Cluster, FaultyTransport, MemberClock, ProcessCrashed

CI_SEEDS = 250
TERM_CI_SEEDS = 250
CI_LEASES = 12

@pytest.fixture(scope="module", autouse=True)
def _collections_walk_only_the_runs_objects():
    """Freeze what the session already holds while this module runs.

    Every run ends with a full garbage collection (`Simulation.run`: a task
    whose error nobody retrieved reports it only when collected). Nothing
    made before this module can be a run's garbage, yet a full collection
    walks it all: late in the suite that was most of each seed's time.
    Frozen objects are skipped by collections until `gc.unfreeze`.
    """
    settle_heap()
    yield
    gc.unfreeze()


@functools.cache
def ci_report(seed: int) -> SimReport:
    return run_seed(seed, duration_leases=CI_LEASES)


@functools.cache
def term_report(seed: int) -> SimReport:
    return run_seed(seed, duration_leases=CI_LEASES, fencing="term")


def run(sim: Simulation) -> SimReport:
    return asyncio.run(sim.run())


@pytest.mark.parametrize("seed", range(CI_SEEDS))
def test_no_seed_breaks_safety_or_livelocks(seed):
    report = ci_report(seed)
    assert report.ok, report.describe()


def test_the_ci_seeds_exercise_every_fault():
    reports = [ci_report(seed) for seed in range(CI_SEEDS)]
    faults = Counter()
    for report in reports:
        faults.update(report.faults)
    assert {"crash", "crash inside a transaction", "restart", "pause", "freeze", "resign",
            "compaction"} <= set(faults)
    assert sum(r.delayed_calls for r in reports) > 0
    assert sum(r.smaller_id_moves for r in reports) > 0
    assert sum(r.simultaneous_challenges for r in reports) > 0
    assert sum(r.fenced_by_broker[call] for r in reports for call in TRANSACTION_CALLS) > 0
    assert sum(r.total("fenced") for r in reports) > 0  # guarded writes among them
    assert sum(r.total("unknown") for r in reports) > 0
    assert any(len(set(r.config.skew_ms.values())) > 1 for r in reports)
    assert any(len(r.config.roles) > r.config.partitions for r in reports)  # roles share


@pytest.mark.parametrize("seed", range(TERM_CI_SEEDS))
def test_no_seed_breaks_safety_or_livelocks_in_term_mode(seed):
    report = term_report(seed)
    assert report.ok, report.describe()


def test_the_term_mode_seeds_exercise_every_fault_and_readers_drop_zombie_writes():
    reports = [term_report(seed) for seed in range(TERM_CI_SEEDS)]
    faults = Counter()
    for report in reports:
        faults.update(report.faults)
    assert {"crash", "restart", "pause", "freeze", "resign", "compaction"} <= set(faults)
    assert {"terms tail fail", "terms tail stall", "terms tail lag"} <= set(faults)
    assert sum(r.delayed_calls for r in reports) > 0
    assert sum(r.simultaneous_challenges for r in reports) > 0  # claims that lost
    assert sum(r.zombies for r in reports) > 0
    assert sum(r.total("dropped_committed") for r in reports) > 0  # accepted, then dropped
    assert sum(r.total("barriers") for r in reports) > 0
    # Nothing transactional: no epoch is minted and the broker refuses nothing.
    assert sum(r.epochs_minted for r in reports) == 0
    assert sum(sum(r.fenced_by_broker.values()) for r in reports) == 0
    assert any(len(r.config.roles) > r.config.partitions for r in reports)  # roles share


def test_the_ci_seeds_exercise_every_library_fault():
    reports = [ci_report(seed) for seed in range(CI_SEEDS)]
    faults = Counter()
    for report in reports:
        faults.update(report.faults)
    assert {"runner cancelled", "runner cancelled handing-over", "runner restarted",
            "function ignores cancellation", "rebalancing move"} <= set(faults)
    drawn = [r.config.library for r in reports]
    assert any(library.observer for library in drawn)
    assert any(library.admission for library in drawn)
    assert any(library.balanced for library in drawn)


def test_a_seed_without_library_faults_draws_none_and_replays_without_them():
    report = run_seed(7, duration_leases=CI_LEASES, library=())
    assert not report.config.library.any
    assert report.ok, report.describe()
    assert report.replay_command.endswith("--faults none")
    assert set(run_seed(7, duration_leases=1).config.library.kinds) == set(LIBRARY_FAULTS)


def test_the_same_seed_replays_the_same_history():
    first = run_seed(7, duration_leases=CI_LEASES)
    second = run_seed(7, duration_leases=CI_LEASES)
    assert first.trace == second.trace
    assert [h.summary() for h in first.histories.values()] == [
        h.summary() for h in second.histories.values()]


# Scripted scenarios: one fault each, on a quiet cluster.


def test_a_frozen_leader_thawed_after_its_lease_is_refused_by_the_broker():
    sim = Simulation(SimConfig.quiet())
    sim.at(1.0, "freeze", "@billing", arg=round(LEASE * 2500))  # its clock stops too
    report = run(sim)
    assert report.ok, report.describe()
    refused = sum(report.fenced_by_broker[call] for call in TRANSACTION_CALLS)
    assert refused >= 1, report.describe()
    assert report.histories["billing"].fenced >= 1
    assert any("stops leading billing" in line and "superseded" in line
               for line in report.trace), report.describe()


def test_simultaneous_challengers_after_a_crash_leave_one_leader():
    members = ("m1", "m2", "m3", "m4", "m5")
    sim = Simulation(SimConfig.quiet(members, stagger={"billing": 0.0}))
    sim.at(1.0, "crash", "@billing")
    report = run(sim)
    assert report.ok, report.describe()
    assert report.simultaneous_challenges >= 1
    assert report.histories["billing"].tenures == 2


def test_a_move_to_a_smaller_producer_id_keeps_the_history_safe():
    config = SimConfig.quiet(producer_ids="descending", near_exhaustion={"billing": 1})
    sim = Simulation(config)
    for second in (2.0, 9.0, 16.0):
        sim.at(second, "crash", "@billing", arg=0)
    report = run(sim)
    assert report.ok, report.describe()
    assert report.smaller_id_moves >= 1
    assert report.histories["billing"].tenures >= 3


def test_roles_sharing_one_partition_survive_a_leader_dying_inside_a_transaction():
    config = SimConfig.quiet(("m1", "m2", "m3"), ("billing", "reports", "ledger"),
                             partitions=1, delay_probability=0.3, delay_max_ms=400)
    sim = Simulation(config)
    # 2.7 s lands inside one of the leader's guarded transactions (asserted
    # below; the schedule is deterministic, so a change to how members read
    # can move the transactions and this instant with them).
    sim.at(2.7, "crash", "@billing", arg=round(LEASE * 1000))
    report = run(sim)
    assert report.ok, report.describe()
    assert report.faults["crash inside a transaction"] == 1, report.describe()


def test_the_same_seed_replays_the_same_history_in_term_mode():
    first = run_seed(7, duration_leases=CI_LEASES, fencing="term")
    second = run_seed(7, duration_leases=CI_LEASES, fencing="term")
    assert first.trace == second.trace
    assert [h.summary() for h in first.histories.values()] == [
        h.summary() for h in second.histories.values()]


# Scripted scenarios in term mode.


def test_a_frozen_term_leader_that_thaws_reads_the_higher_claim_and_stops():
    sim = Simulation(SimConfig.quiet(fencing="term"))
    sim.at(1.0, "freeze", "@billing", arg=round(LEASE * 2500))
    report = run(sim)
    assert report.ok, report.describe()
    assert report.zombies == 1
    assert any("m1.1 stops leading billing (term 1): fenced" in line and "claimed term 2" in line
               for line in report.trace), report.describe()
    history = report.histories["billing"]
    assert (history.tenures, history.dropped, history.lost) == (2, 0, 0), report.describe()


def test_a_zombie_whose_terms_tail_lags_writes_after_the_barrier_and_readers_drop_it():
    """The leader's consumer of the terms topic lags one and a half leases;
    frozen, then thawed with its clock behind, it goes on writing under term 1
    after the successor's barrier. Its tail shows it neither the claim of term
    2 nor its own heartbeats in time, so it stops at its fence deadline, which
    no heartbeat it sent after the lag began could extend."""
    sim = Simulation(SimConfig.quiet(fencing="term"))
    sim.at(0.5, "slow", "@billing", arg=("tail_terms", round(LEASE * 1500)))
    sim.at(1.0, "freeze", "@billing", arg=round(LEASE * 2500))
    report = run(sim)
    assert report.ok, report.describe()
    history = report.histories["billing"]
    assert history.dropped_committed >= 5, report.describe()  # accepted by the broker
    assert history.dropped == history.dropped_committed
    assert sum(report.fenced_by_broker.values()) == 0
    assert 0 < report.longest_zombie_ms <= ZOMBIE_LEASES * LEASE * 1000
    assert any("m1.1 stops leading billing (term 1): fenced" in line
               and "could not be renewed before the fence deadline" in line
               for line in report.trace), report.describe()


def test_a_thawed_term_leader_whose_terms_tail_stalls_stops_by_its_fence_deadline():
    """Frozen past the lease, the leader thaws with its clock behind while
    its terms tail delivers nothing for six leases: it sees neither the claim
    of term 2 nor its own heartbeats, which the broker acknowledges all the
    same. Only a heartbeat read back counts, so its tenure and its function
    end at its fence deadline, long before the tail reads again."""
    sim = Simulation(SimConfig.quiet(fencing="term"))
    sim.at(1.0, "freeze", "@billing", arg=round(LEASE * 2500))
    sim.at(1.0, "tail", "@billing", arg=("stall", round(LEASE * 6000)))
    report = run(sim)
    assert report.ok, report.describe()
    assert report.zombies == 1
    assert 0 < report.longest_zombie_ms <= LEASE * 1000, report.describe()
    assert any("m1.1 stops leading billing (term 1): fenced" in line
               and "could not be renewed before the fence deadline" in line
               for line in report.trace), report.describe()


def test_a_term_leader_whose_terms_tail_fails_once_reads_again_and_keeps_the_role():
    sim = Simulation(SimConfig.quiet(fencing="term"))
    sim.at(2.0, "tail", "@billing", arg=("fail",))
    report = run(sim)
    assert report.ok, report.describe()
    assert report.faults["terms tail fail"] == 1
    assert report.histories["billing"].tenures == 1, report.describe()


def test_simultaneous_claims_after_a_crash_leave_one_holder_of_the_term():
    members = ("m1", "m2", "m3", "m4", "m5")
    sim = Simulation(SimConfig.quiet(members, stagger={"billing": 0.0}, fencing="term"))
    sim.at(1.0, "crash", "@billing")
    report = run(sim)
    assert report.ok, report.describe()
    assert report.simultaneous_challenges >= 1  # claims of a term someone claimed first
    assert report.histories["billing"].tenures == 2


# The simulation can fail: brokers broken on purpose must be caught.


class NoFencingBroker(MemoryBroker):
    """Accepts writes and commits under any token the role ever had."""

    def _current(self, role, token):
        self.expire_transactions()
        return self._ids[role]


class NoBumpBroker(MemoryBroker):
    """InitProducerId hands out the current token again instead of a new one."""

    def _bump(self, entry):
        self.epochs_minted += 1


class RefusingBroker(MemoryBroker):
    """Fences every transaction: nobody can ever write a lease."""

    def begin(self, role, token):
        raise FencedError(f"{role}: refused")


def test_the_simulation_catches_a_broker_that_accepts_superseded_tokens():
    sim = Simulation(SimConfig.quiet(), broker_factory=NoFencingBroker)
    sim.at(1.0, "freeze", "@billing", arg=round(LEASE * 2500))
    report = run(sim)
    assert "tenure-regression" in report.histories["billing"].kinds(), report.describe()


def test_the_simulation_catches_a_coordinator_that_reuses_a_token():
    sim = Simulation(SimConfig.quiet(), broker_factory=NoBumpBroker)
    sim.at(1.0, "freeze", "@billing", arg=round(LEASE * 2500))
    report = run(sim)
    assert any("live leaderships hold the current token" in v
               for v in report.invariant_violations), report.describe()


def test_a_role_without_a_leader_for_twenty_leases_is_reported_as_a_livelock():
    config = SimConfig.quiet(duration=LEASE * (LIVELOCK_LEASES + 2))
    report = run(Simulation(config, broker_factory=RefusingBroker))
    assert report.livelocks, report.describe()
    assert not report.ok


class ClaimLosingBroker(MemoryBroker):
    """Compacts the terms topic as if every record of a partition shared one key."""

    def compact(self, topic):
        super().compact(topic)
        if topic == TERMS_TOPIC:
            for log in self.topics[topic].partitions:
                log.entries = log.entries[-1:]


class ClaimBlindTermsTail(MemoryTransport):
    """A client whose tail of the terms topic never shows a claim: a broken
    reader that still returns the heartbeats, so a leader reads its own back
    and its fence deadline moves on, but it never learns of a higher term."""

    async def tail_terms(self, partition, from_offset, *, role=None):
        return WithoutClaims(await super().tail_terms(partition, from_offset, role=role))


def without_claims(records, of=None):
    """`records` less the claims (of member `of`, or of every member)."""
    return [r for r in records
            if (key := decode_term_key(r.key)).kind is not TermKind.CLAIM
            or (of is not None and key.member != of)]


class WithoutClaims:
    def __init__(self, inner, of=None) -> None:
        self._inner = inner
        self._of = of

    async def next(self):
        read = await self._inner.next()
        kept = without_claims(read.records, self._of)
        return PartitionRead(kept, read.last_stable_offset, read.high_watermark)

    def returned_to(self) -> int:
        return self._inner.returned_to()

    async def close(self) -> None:
        await self._inner.close()


class BlindToClaimsOf(MemoryTransport):
    """A client that never reads `member`'s claims on the terms topic."""

    member = "m1"

    async def read_terms(self, partition):
        read = await super().read_terms(partition)
        return PartitionRead(without_claims(read.records, self.member),
                             read.last_stable_offset, read.high_watermark)

    async def tail_terms(self, partition, from_offset, *, role=None):
        return WithoutClaims(await super().tail_terms(partition, from_offset, role=role),
                             self.member)


def test_the_simulation_catches_a_term_won_twice():
    """m2 never reads m1's claim of term 1: seeing no leader, it claims term 1
    too, and its own fold makes that losing claim the winner."""
    made = []

    def transports(broker, **kwargs):  # m1's process is made first, with a sound client
        made.append(None)
        return (MemoryTransport if len(made) == 1 else BlindToClaimsOf)(broker, **kwargs)

    sim = Simulation(SimConfig.quiet(fencing="term"), transport_factory=transports)
    report = run(sim)
    assert any("term 1 was won twice: by m1's claim" in v and "in m2.1's fold by m2's" in v
               for v in report.invariant_violations), report.describe()


def test_the_simulation_catches_compaction_that_loses_the_claims():
    config = SimConfig.quiet(("m1", "m2", "m3"), fencing="term", cleaner_gap=LEASE)
    sim = Simulation(config, broker_factory=ClaimLosingBroker)
    sim.at(1.0, "crash", "@billing", arg=0)
    report = run(sim)
    assert any("compaction of the terms topic changed" in v
               for v in report.invariant_violations), report.describe()


def test_the_simulation_catches_a_zombie_that_never_reads_the_higher_claim():
    sim = Simulation(SimConfig.quiet(fencing="term"), transport_factory=ClaimBlindTermsTail)
    sim.at(1.0, "freeze", "@billing", arg=round(LEASE * 2500))
    report = run(sim)
    assert any("still leads term 1 after running" in v
               for v in report.invariant_violations), report.describe()
    assert "zombie-not-stopped" in report.histories["billing"].kinds(), report.describe()


# Regression tests for bugs the simulation found.


async def test_bug_fenced_error_for_a_commit_whose_response_arrives_after_the_fence_deadline():
    """Found by seed 5. The commit reached the broker and took effect, but its
    response came back after the fence deadline: `Leadership._bounded` then
    abandons it and raises FencedError, although the write is visible. A
    guarded write that raises FencedError must never be visible."""
    cluster = Cluster()
    clock = MemberClock(cluster.clock)
    late: dict[str, tuple[int, int]] = {}
    transport = FaultyTransport(MemoryTransport(cluster.broker, clock=clock), clock,
                                delay=lambda call: late.get(call, (0, 0)))
    leader_task = cluster.candidate("a", transport=transport)
    await cluster.until(leader_task.done, within=1)
    leader = leader_task.result()
    late["commit"] = (0, round(LEASE * 1000))  # the broker commits; the answer is late

    async def write() -> BaseException | None:
        try:
            async with leader.transaction() as txn:
                await txn.send("out", b"invoice-1", partition=0)
        except Exception as exc:
            return exc
        return None

    outcome = asyncio.create_task(write())
    await cluster.until(outcome.done, within=LEASE * 2)
    assert cluster.out_values() == [b"invoice-1"]  # the write took effect
    assert not isinstance(outcome.result(), FencedError), outcome.result()


async def test_bug_a_cancelled_guarded_write_leaves_its_send_running_in_the_background():
    """Found by the simulation's loop-error check. `Leadership._bounded` did
    not cancel its inner call when its caller was cancelled: the send went on
    alone, reached the broker after the transaction was aborted, and died
    with an exception nobody retrieved."""
    cluster = Cluster()
    clock = MemberClock(cluster.clock)
    slow: dict[str, tuple[int, int]] = {}
    transport = FaultyTransport(MemoryTransport(cluster.broker, clock=clock), clock,
                                delay=lambda call: slow.get(call, (0, 0)))
    leader_task = cluster.candidate("a", transport=transport)
    await cluster.until(leader_task.done, within=1)
    leader = leader_task.result()
    slow["send"] = (500, 0)  # the request is on its way

    async def write() -> None:
        async with leader.transaction() as txn:
            await txn.send("out", b"invoice-1", partition=0)

    writer = asyncio.create_task(write())
    await cluster.advance(0.1)
    writer.cancel()  # the caller gives up (e.g. its role runner stops it)
    await cluster.advance(1.0)
    assert writer.cancelled()
    assert cluster.broker.partition("out", 0).entries == []  # nothing reached the broker
    assert transport.fenced_by_broker["send"] == 0


def test_the_near_exhaustion_setting_starts_a_role_just_below_the_last_epoch():
    config = SimConfig.quiet(near_exhaustion={"billing": 3}, duration=1.0)
    report = run(Simulation(config))
    assert report.ok, report.describe()
    assert any(f":{MAX_EPOCH - 3 + 1}" in line for line in report.trace), report.describe()


async def test_a_term_candidate_whose_two_followers_fail_at_once_retrieves_both_errors():
    """A standby waits on its roster and its terms follower at once; when both
    fail in one step (its process dies while stopped, both reads held at the
    pause point), the candidate raises one error and has taken the other's,
    so asyncio reports no exception as never retrieved (found by the
    term-mode seeds' loop-error check, seed 5 first)."""
    term = {"fencing": "term", "outputs": ("out",)}
    cluster = Cluster()
    first = cluster.candidate("a", **term)
    await cluster.until(first.done, within=1)
    clock = MemberClock(cluster.clock)
    transport = FaultyTransport(MemoryTransport(cluster.broker, clock=clock), clock)
    standby = cluster.candidate("b", transport=transport, clock=clock, **term)
    await cluster.advance(0.5)
    assert not standby.done()
    unretrieved: list[str] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, context: unretrieved.append(
        f"{context['message']}: {context['future'].get_coro().__qualname__}"))
    other = cluster.candidate("c", **term)
    try:
        clock.pause()  # SIGSTOP: each follower's next read waits at the pause point
        await cluster.advance(1.5)  # c's registration and a's heartbeat reach both partitions
        transport.crash()
        await cluster.until(standby.done, within=5)
        with pytest.raises(ProcessCrashed):
            standby.result()
        gc.collect()
        await cluster.settle()
    finally:
        loop.set_exception_handler(None)
        other.cancel()
        for task in first.result()._tasks:
            task.cancel()
    assert unretrieved == []


def test_a_runner_cancelled_as_the_broker_refuses_its_first_lease_ends_with_its_campaign():
    """A runner cancelled while campaigning, at the instant the broker refuses the
    first lease of its challenge (the campaign's clean-up then runs through the
    cancellation): the campaign ends too, so the runner ends rather than
    waiting for it for good (the seed is one where this happens)."""
    report = run_seed(4848, duration_leases=CI_LEASES)
    assert any("runner of billing is cancelled while campaigning (at a txn_write_lease)"
               in line for line in report.trace), report.describe()
    assert report.ok, report.describe()

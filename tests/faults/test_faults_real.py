"""Faults injected into real member processes on the real broker.

Every test starts `tests.faults.fault_member` processes for one role, injects one
fault, lets the role settle, stops every process by PID, and ends with the
history checker over the output and every member's journal: no violation,
nothing lost. The report line each prints (`FAULT-REPORT`) carries the
figures of docs/reliability.md; ``FAULT_TRIALS=N`` repeats each test. The
term-mode zombie's run is judged through a `TermFilter` instead, as the
history checker knows epoch mode only.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from krabka import FencingToken
from krabka.format.partition import role_partition
from krabka.format.records import Key, Kind, decode_key
from krabka.kafka.protocol.messages import TRANSACTIONAL_ID_NOT_FOUND
from tests.faults.fault_run import TRIALS, FaultRun, Timing
from tests.faults.history import decode_record
from tests.support.kafka_io import (
    create_state_and_output_topics,
    read_committed,
    stamp_of,
    transactional_id_error,
)
from tests.support.polling import eventually
from tests.support.processes import Service

pytestmark = pytest.mark.integration

TIMEOUT = 60
TIMING = Timing(lease=3.0, renew=1.0, stagger=0.5, interval=0.1)
# How a tenure ends when the leader's own (monotonic) fence deadline passes
# (krabka/tenure.py): what a zombie whose clocks say its lease is
# live must not be stopped by.
OWN_DEADLINE = "could not be renewed before the fence deadline"
trials = pytest.mark.parametrize("trial", range(TRIALS))


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@pytest.fixture
async def run(kafka_bootstrap, tmp_path):
    """A role on fresh topics of the session broker; its members stopped by PID at the end."""
    state, output = await create_state_and_output_topics(kafka_bootstrap, 4)
    fault_run = FaultRun(kafka_bootstrap, state, output, tmp_path, timing=TIMING)
    try:
        yield fault_run
    finally:
        fault_run.stop_all()


@pytest.fixture
async def term_run(kafka_bootstrap, tmp_path):
    """As `run`, with the members in term mode."""
    state, output = await create_state_and_output_topics(kafka_bootstrap, 4)
    fault_run = FaultRun(kafka_bootstrap, state, output, tmp_path, timing=TIMING,
                         fencing="term")
    try:
        yield fault_run
    finally:
        fault_run.stop_all()


async def wait_roster(run: FaultRun, members: list[str]) -> None:
    await eventually(run.role_state, lambda state: state.roster == members, within=TIMEOUT)


def assert_clean(report) -> None:
    assert report.violations == []
    assert report.lost == 0


@trials
async def test_sigkill_of_the_leader_loses_no_committed_write(run, trial):
    a = run.start("a")
    a.wait_for("leading", TIMEOUT)
    b = run.start("b")
    await wait_roster(run, ["a", "b"])
    c = run.start("c")
    await wait_roster(run, ["a", "b", "c"])
    killed_at = now_ms()
    run.kill(a)
    successor = b.wait_for("leading", TIMEOUT)
    await eventually(lambda: _committed_by(run, "b"), lambda n: n >= 10, within=TIMEOUT)
    assert not c.has("leading")
    run.stop_all()

    report = await run.report("sigkill", fault_at_ms=killed_at)
    assert_clean(report)
    assert successor["tenure"] > 0


async def leader_and_standby(run: FaultRun, *leader_args: str) -> tuple[Service, Service]:
    """a (started with `leader_args`) leads and has committed a few writes; b is
    registered behind it."""
    a = run.start("a", *leader_args)
    a.wait_for("leading", TIMEOUT)
    b = run.start("b")
    await wait_roster(run, ["a", "b"])
    await eventually(lambda: _committed_by(run, "a"), lambda n: n >= 5, within=TIMEOUT)
    return a, b


async def _attempted(run: FaultRun) -> int:
    return len(run.attempts())


async def _committed_by(run: FaultRun, member: str) -> int:
    return sum(1 for a in run.attempts()
               if a.outcome == "committed" and a.record.member == member)


@trials
async def test_sigstop_past_the_deadline_then_sigcont_commits_nothing_after_the_successor(
    run, trial
):
    a, b = await leader_and_standby(run)
    stopped_at = now_ms()
    a.signal(signal.SIGSTOP)
    b.wait_for("leading", TIMEOUT)
    await eventually(lambda: _committed_by(run, "b"), lambda n: n >= 5, within=TIMEOUT)
    a.signal(signal.SIGCONT)
    a.wait_for("fenced", TIMEOUT)
    await eventually(lambda: _committed_by(run, "b"), lambda n: n >= 10, within=TIMEOUT)
    run.stop_all()

    report = await run.report("sigstop-sigcont", fault_at_ms=stopped_at)
    assert_clean(report)
    assert report.tenures == 2


@trials
async def test_a_leader_frozen_at_any_instant_whose_clock_comes_back_behind_commits_nothing_late(
    run, trial
):
    """A frozen VM: SIGSTOP at a random instant, then both its clocks (wall
    and monotonic) are set back by the time it was frozen, so on SIGCONT it
    believes its lease and writes. Its next writes are refused by the broker,
    or, if the freeze caught a call in flight, that call outlives the
    transaction timeout and ends the tenure as unknown; either way none is
    visible, and its own fence deadline did not end the tenure."""
    a, b = await leader_and_standby(run)
    frozen_at = now_ms()
    a.signal(signal.SIGSTOP)
    b.wait_for("leading", TIMEOUT)
    await eventually(lambda: _committed_by(run, "b"), lambda n: n >= 5, within=TIMEOUT)
    run.set_clocks_back_after_freeze(a, frozen_at)
    a.signal(signal.SIGCONT)
    fenced = a.wait_for("fenced", TIMEOUT)
    await eventually(lambda: _committed_by(run, "b"), lambda n: n >= 10, within=TIMEOUT)
    run.stop_all()

    report = await run.report("frozen-zombie", fault_at_ms=frozen_at)
    assert_clean(report)
    assert report.tenures == 2
    assert OWN_DEADLINE not in fenced["error"], fenced


@trials
async def test_a_leader_frozen_inside_an_open_transaction_is_refused_by_the_broker_on_thawing(
    run, trial
):
    """The zombie at its worst: frozen after sending, before committing, with
    both its clocks set back on thawing, so it commits at once."""
    a, b = await leader_and_standby(run)
    a.signal(signal.SIGUSR1)
    frozen_at = a.wait_for("freezing", TIMEOUT)["t_ms"]
    await eventually(lambda: _process_state(a.pid), lambda state: state == "T", within=TIMEOUT)
    b.wait_for("leading", TIMEOUT)
    await eventually(lambda: _committed_by(run, "b"), lambda n: n >= 5, within=TIMEOUT)
    run.set_clocks_back_after_freeze(a, frozen_at)
    a.signal(signal.SIGCONT)
    fenced = a.wait_for("fenced", TIMEOUT)
    await eventually(lambda: _committed_by(run, "b"), lambda n: n >= 10, within=TIMEOUT)
    run.stop_all()

    report = await run.report("frozen-zombie-in-transaction", fault_at_ms=frozen_at)
    assert_clean(report)
    assert report.tenures == 2
    frozen_write = max((x for x in run.attempts() if x.record.member == "a"),
                       key=lambda x: x.record.seq)
    assert frozen_write.outcome == "fenced", frozen_write
    assert report.refused_by_broker >= 1, fenced


@trials
async def test_term_mode_a_leader_frozen_inside_a_write_writes_on_thawing_and_readers_drop_it(
    term_run, trial
):
    """Term mode's zombie at its worst: frozen inside a write, past the
    library's last check, both its clocks set back on thawing, so it writes
    at once. Nothing refuses it at the broker; a `TermFilter` drops every
    record of it that follows the successor's barrier, keeps the ones before,
    and its tenure ends when it reads the successor's claim (not at its own
    deadline): the runner reports it fenced and its function stops."""
    run = term_run
    a, b = await leader_and_standby(run, "--freeze-in", "write")
    a.signal(signal.SIGUSR1)
    frozen_at = a.wait_for("freezing", TIMEOUT)["t_ms"]
    await eventually(lambda: _process_state(a.pid), lambda state: state == "T", within=TIMEOUT)
    successor = b.wait_for("leading", TIMEOUT)
    await eventually(lambda: _committed_by(run, "b"), lambda n: n >= 5, within=TIMEOUT)
    run.set_clocks_back_after_freeze(a, frozen_at)
    a.signal(signal.SIGCONT)
    fenced = a.wait_for("fenced", TIMEOUT)
    await eventually(lambda: _committed_by(run, "b"), lambda n: n >= 10, within=TIMEOUT)
    run.stop_all()

    assert OWN_DEADLINE not in fenced["error"], fenced
    assert f"claimed term {successor['term']}" in fenced["error"], fenced
    assert [e["event"] for e in a.events].count("leading") == 1
    verdicts = await run.term_verdicts()
    [barrier] = [r.offset for r, _ in verdicts
                 if stamp_of(r).barrier and stamp_of(r).term == successor["term"]]
    data = [(r.offset, decode_record(r.value), verdict)
            for r, verdict in verdicts if not stamp_of(r).barrier]
    zombie_late = [verdict for offset, record, verdict in data
                   if record.member == "a" and offset > barrier]
    # Frozen past its last check, the zombie sends the write on thawing, before
    # or after its tail folds the successor's claim: the broker takes it.
    assert zombie_late, "the thawed zombie's write did not reach the log"
    assert set(zombie_late) == {"drop"}
    assert {verdict for offset, record, verdict in data
            if record.member == "b" or offset < barrier} == {"pass"}
    # The broker lost nothing acknowledged, the zombie's accepted writes included.
    in_log = {record.write_id for _, record, _ in data}
    attempts = run.attempts()
    assert {x.write_id for x in attempts if x.outcome == "committed"} <= in_log
    # The function stopped: after the tenure ended, at most one attempt, refused.
    after = [x for x in attempts if x.record.member == "a" and x.started_ms >= fenced["t_ms"]]
    assert len(after) <= 1
    assert all(x.outcome == "fenced" for x in after), after
    assert await transactional_id_error(run.bootstrap, run.role) == TRANSACTIONAL_ID_NOT_FOUND
    history = await run.term_history()
    assert history.ok, history
    assert history.dropped == len(zombie_late), history
    thawed = max((x for x in attempts if x.record.member == "a"), key=lambda x: x.record.seq)
    print(f"TERM-ZOMBIE the frozen write ended {thawed.outcome}; {len(zombie_late)} zombie "
          f"records after the successor's barrier, all dropped")


async def _process_state(pid: int) -> str:
    """The process's state letter from /proc (T: stopped)."""
    stat = Path(f"/proc/{pid}/stat").read_text()  # noqa: ASYNC240 (procfs, never blocks)
    return stat.rsplit(")", 1)[1].split()[0]


@trials
async def test_a_leader_whose_clock_is_behind_by_more_than_the_lease_is_deposed_and_refused(
    run, trial
):
    """Its deadlines are in the past for everyone else: they challenge at
    once, and the broker refuses the skewed leader's next writes."""
    a = run.start("a", "--skew-ms", str(-int(TIMING.lease * 1000) - 2000))
    a.wait_for("leading", TIMEOUT)
    await eventually(lambda: _committed_by(run, "a"), lambda n: n >= 5, within=TIMEOUT)
    deposed_at = now_ms()
    b = run.start("b")
    b.wait_for("leading", TIMEOUT)
    a.wait_for("fenced", TIMEOUT)
    await eventually(lambda: _committed_by(run, "b"), lambda n: n >= 30, within=TIMEOUT)
    assert [e["event"] for e in b.events].count("leading") == 1
    assert [e["event"] for e in a.events].count("leading") == 1
    run.stop_all()

    report = await run.report("skew-leader-behind", fault_at_ms=deposed_at)
    assert_clean(report)
    assert report.tenures == 2


@trials
async def test_a_standby_whose_clock_is_ahead_by_more_than_the_lease_deposes_a_healthy_leader(
    run, trial
):
    """Skew moves failover time, never safety: the skewed standby sees every
    lease as lapsed and takes over; the broker fences the old leader."""
    a = run.start("a")
    a.wait_for("leading", TIMEOUT)
    await eventually(lambda: _committed_by(run, "a"), lambda n: n >= 5, within=TIMEOUT)
    joined_at = now_ms()
    b = run.start("b", "--skew-ms", str(int(TIMING.lease * 1000) + 2000))
    b.wait_for("leading", TIMEOUT)
    a.wait_for("fenced", TIMEOUT)
    await eventually(lambda: _committed_by(run, "b"), lambda n: n >= 30, within=TIMEOUT)
    assert [e["event"] for e in a.events].count("leading") == 1
    run.stop_all()

    report = await run.report("skew-standby-ahead", fault_at_ms=joined_at)
    assert_clean(report)
    assert report.tenures == 2


@trials
async def test_two_processes_sharing_a_member_id_never_churn_epochs(run, trial):
    first = run.start("a")
    leading = first.wait_for("leading", TIMEOUT)
    second = run.start("a")
    await eventually(lambda: _committed_by(run, "a"), lambda n: n >= 10, within=TIMEOUT)
    joined = len(run.attempts())
    await eventually(lambda: _attempted(run), lambda n: n >= joined + 40, within=TIMEOUT)

    assert not second.has("leading")
    status = await run.leadership_status()
    assert status.authoritative(FencingToken(leading["producer_id"], leading["producer_epoch"]))
    assert any("the same member id" in line for line in second.stderr)

    killed_at = now_ms()
    run.kill(first)
    second.wait_for("leading", TIMEOUT)
    await eventually(lambda: _attempted(run), lambda n: n >= joined + 60, within=TIMEOUT)
    run.stop_all()

    report = await run.report("shared-member-id", fault_at_ms=killed_at)
    assert_clean(report)
    assert report.tenures == 2


# The cleaner may compact a segment as soon as it is closed: segments close
# after 200 ms (at the next append), tombstones go after 500 ms.
EAGER_COMPACTION = {"segment.ms": "200", "min.cleanable.dirty.ratio": "0.01",
                    "delete.retention.ms": "500", "min.compaction.lag.ms": "0"}
CHURNERS = 6


@pytest.fixture
async def compacting_run(kafka_bootstrap, tmp_path):
    """A role whose state topic the broker's cleaner compacts within seconds."""
    state, output = await create_state_and_output_topics(kafka_bootstrap, 4,
                                                         state_configs=EAGER_COMPACTION)
    fault_run = FaultRun(kafka_bootstrap, state, output, tmp_path, timing=TIMING)
    try:
        yield fault_run
    finally:
        fault_run.stop_all()


@trials
async def test_compaction_under_member_churn_keeps_the_roster_order_and_the_leader(
    compacting_run, trial
):
    run = compacting_run
    a = run.start("a")
    leading = a.wait_for("leading", TIMEOUT)
    b = run.start("b")
    await wait_roster(run, ["a", "b"])
    c = run.start("c")
    await wait_roster(run, ["a", "b", "c"])
    for number in range(CHURNERS):
        churner = run.start(f"churn-{number}", "--leave-on-stop")
        await wait_roster(run, ["a", "b", "c", f"churn-{number}"])
        code = churner.stop()
        assert churner.has("left"), (code, [e["event"] for e in churner.events],
                                     "".join(churner.stderr[-30:]))
        await wait_roster(run, ["a", "b", "c"])
    renewed_since = leading["t_ms"]

    # Compacted: every churner's registration and tombstone is gone, and of
    # the leader's lease records (one a second) at most two remain.
    kept = await eventually(lambda: _partition_keys(run), _compacted, within=TIMEOUT * 2)
    renewals = (now_ms() - renewed_since) // int(TIMING.renew * 1000)
    state = await run.role_state()
    assert state.roster == ["a", "b", "c"]
    assert state.holder == "a"
    assert state.token == FencingToken(leading["producer_id"], leading["producer_epoch"])

    killed_at = now_ms()
    run.kill(a)
    b.wait_for("leading", TIMEOUT)
    await eventually(lambda: _committed_by(run, "b"), lambda n: n >= 10, within=TIMEOUT)
    assert not c.has("leading")
    run.stop_all()

    report = await run.report("compaction-under-churn", fault_at_ms=killed_at)
    assert_clean(report)
    assert report.tenures == 2
    print(f"compaction: {len(kept)} records kept in the role's partition after "
          f"{renewals} lease renewals and {2 * CHURNERS} churn records")


async def _partition_keys(run: FaultRun) -> list[Key]:
    """The keys of the records the role's partition of the state topic holds now."""
    partition = role_partition(run.role, run.partitions)
    return [decode_key(r.key) for r in await read_committed(run.bootstrap, run.state, partition)]


def _compacted(keys: list[Key]) -> bool:
    leases = sum(1 for key in keys if key.kind == Kind.LEASE)
    return leases <= 2 and not any(key.member.startswith("churn-") for key in keys)

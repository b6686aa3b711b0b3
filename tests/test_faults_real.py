"""Faults injected into real member processes on the real broker (issue 5, item 3).

Every test starts `tests.fault_member` processes for one role, injects one
fault, lets the role settle, stops every process by PID, and ends with the
history checker over the output and every member's journal: no violation,
nothing lost. The report line each prints (`FAULT-REPORT`) carries the
figures of docs/reliability.md; ``FAULT_TRIALS=N`` repeats each test.
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.fault_run import TRIALS, FaultRun, Timing, create_topics
from tests.polling import eventually

pytestmark = pytest.mark.integration

TIMEOUT = 60
TIMING = Timing(lease=3.0, renew=1.0, stagger=0.5, interval=0.1)
trials = pytest.mark.parametrize("trial", range(TRIALS))


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@pytest.fixture
async def run(kafka_bootstrap, tmp_path):
    """A role on fresh topics of the session broker; its members stopped by PID at the end."""
    state, output = await create_topics(kafka_bootstrap, 4)
    fault_run = FaultRun(kafka_bootstrap, state, output, tmp_path, timing=TIMING)
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
    c = run.start("c")
    await wait_roster(run, ["a", "b", "c"])
    a.wait_for("leading", TIMEOUT)
    killed_at = now_ms()
    run.kill(a)
    successor = b.wait_for("leading", TIMEOUT)
    await eventually(lambda: _committed_by(run, "b"), lambda n: n >= 10, within=TIMEOUT)
    assert not c.has("leading")
    run.stop_all()

    report = await run.report("sigkill", fault_at_ms=killed_at)
    assert_clean(report)
    assert successor["tenure"] > 0


async def _committed_by(run: FaultRun, member: str) -> int:
    return sum(1 for a in run.attempts()
               if a.outcome == "committed" and a.record.member == member)


@trials
async def test_sigstop_past_the_deadline_then_sigcont_commits_nothing_after_the_successor(
    run, trial
):
    a = run.start("a")
    a.wait_for("leading", TIMEOUT)
    b = run.start("b")
    await wait_roster(run, ["a", "b"])
    await eventually(lambda: _committed_by(run, "a"), lambda n: n >= 5, within=TIMEOUT)
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
async def test_a_frozen_leader_whose_clock_comes_back_behind_is_refused_by_the_broker(
    run, trial
):
    """The zombie: SIGSTOP (a frozen VM), then its clock is set back by the
    time it was frozen, so on SIGCONT it believes its lease and writes."""
    a = run.start("a")
    a.wait_for("leading", TIMEOUT)
    b = run.start("b")
    await wait_roster(run, ["a", "b"])
    await eventually(lambda: _committed_by(run, "a"), lambda n: n >= 5, within=TIMEOUT)
    frozen_at = now_ms()
    a.signal(signal.SIGSTOP)
    b.wait_for("leading", TIMEOUT)
    await eventually(lambda: _committed_by(run, "b"), lambda n: n >= 5, within=TIMEOUT)
    run.set_clock(a, -(now_ms() - frozen_at))
    a.signal(signal.SIGCONT)
    a.wait_for("fenced", TIMEOUT)
    await eventually(lambda: _committed_by(run, "b"), lambda n: n >= 10, within=TIMEOUT)
    run.stop_all()

    report = await run.report("frozen-zombie", fault_at_ms=frozen_at)
    assert_clean(report)
    assert report.refused_by_broker + report.leases_refused >= 1
    zombie = [a_ for a_ in run.attempts() if a_.record.member == "a" and a_.outcome != "committed"]
    assert zombie, "the zombie attempted no write after it thawed"

"""An admission holds its own member's challenge while the process is too busy.

`RenewalLatencyAdmission` closes for a while after a slow lease write; a
candidate whose turn has come waits while its admission is closed, in both
fencing modes, and a challenger ranked behind it takes the role at its own
slot meanwhile; a tenure taken through an admission tells it of every lease
write. Time is driven by hand.
"""

import asyncio
import logging

import pytest

from krabka import LeaderRunner, LeadershipOptions, RenewalLatencyAdmission
from krabka.testing import ManualClock
from tests.support.sim import LEASE, RENEW, STAGGER, Cluster, crash, lead

TERM = {"fencing": "term", "outputs": ("out",)}


def no_spread() -> float:
    return 0.0


def closed(clock: ManualClock, seconds: float) -> RenewalLatencyAdmission:
    """An admission a slow renewal has just closed for `seconds` (waits not spread)."""
    admission = RenewalLatencyAdmission(limit=0.5, hold=seconds, clock=clock, random=no_spread)
    admission.lease_written(0.6)
    return admission


def test_an_admission_is_open_until_a_renewal_takes_longer_than_the_limit():
    clock = ManualClock()
    admission = RenewalLatencyAdmission(limit=0.5, hold=10, clock=clock, random=no_spread)
    admission.lease_written(0.5)
    assert admission.closed_for_ms() == 0
    assert not admission.closed
    admission.lease_written(0.501)
    assert admission.closed_for_ms() == 10_000
    assert admission.closed
    assert admission.closings == 1


def test_a_slow_write_that_closes_the_admission_says_so_once(caplog):
    admission = RenewalLatencyAdmission(limit=2.0, hold=10.0, clock=ManualClock())
    with caplog.at_level(logging.WARNING, logger="krabka.scale.admission"):
        admission.lease_written(2.5)
        admission.lease_written(3.0)
    assert admission.closed
    assert [r.getMessage() for r in caplog.records if r.name == "krabka.scale.admission"] == [
        "a lease write took 2.50 s, over the admission's limit of 2.00 s: this process takes "
        "no role for 10.0 s"]


def test_a_closed_admission_opens_after_the_hold_and_each_slow_renewal_extends_it():
    clock = ManualClock()
    admission = closed(clock, 10)
    clock.advance_ms(4_000)
    assert admission.closed_for_ms() == 6_000
    admission.lease_written(2.0)
    assert admission.closed_for_ms() == 10_000
    clock.advance_ms(10_000)
    assert admission.closed_for_ms() == 0


def test_waiting_candidates_are_told_waits_spread_over_the_hold():
    clock = ManualClock()
    draws = iter([0.0, 0.5, 0.999])
    admission = RenewalLatencyAdmission(limit=0.5, hold=10, clock=clock,
                                        random=lambda: next(draws))
    admission.lease_written(1.0)
    clock.advance_ms(4_000)
    assert [admission.closed_for_ms() for _ in range(3)] == [6_000, 11_000, 15_990]


def test_a_rate_admits_a_second_s_worth_at_once_then_one_role_per_interval():
    clock = ManualClock()
    admission = RenewalLatencyAdmission(limit=1, hold=10, clock=clock, rate=4, random=no_spread)
    assert [admission.closed_for_ms() for _ in range(5)] == [0, 0, 0, 0, 250]
    clock.advance_ms(250)
    assert admission.closed_for_ms() == 0
    assert admission.closed_for_ms() == 250
    clock.advance_ms(100)
    assert admission.closed_for_ms() == 150
    clock.advance_ms(10_000)  # a long quiet time refills one second's worth, no more
    assert [admission.closed_for_ms() for _ in range(5)] == [0, 0, 0, 0, 250]


def test_a_slow_lease_write_closes_a_rated_admission_and_asking_takes_nothing_meanwhile():
    clock = ManualClock()
    admission = RenewalLatencyAdmission(limit=1, hold=10, clock=clock, rate=2, random=no_spread)
    admission.lease_written(1.5)
    assert [admission.closed_for_ms() for _ in range(3)] == [10_000] * 3
    clock.advance_ms(10_000)
    assert [admission.closed_for_ms() for _ in range(3)] == [0, 0, 500]


def test_a_rate_that_is_not_positive_is_refused():
    with pytest.raises(ValueError, match="positive number of roles a second"):
        RenewalLatencyAdmission(limit=1, hold=1, rate=0)


@pytest.mark.parametrize(("limit", "hold"), [(0, 1), (1, 0), (-1, 1), (float("nan"), 1)])
def test_a_limit_or_hold_that_is_not_a_positive_number_of_seconds_is_refused(limit, hold):
    with pytest.raises(ValueError, match="positive seconds"):
        RenewalLatencyAdmission(limit=limit, hold=hold)


@pytest.mark.parametrize("mode", [{}, TERM], ids=["epoch", "term"])
async def test_a_vacant_role_waits_for_the_admission_to_open_then_is_taken(mode):
    cluster = Cluster()
    admission = closed(cluster.clock, 5)
    candidate = cluster.candidate("a", admission=admission, **mode)
    await cluster.advance(4.9)
    assert not candidate.done()
    await cluster.until(candidate.done, within=0.5)
    assert candidate.result().member == "a"


@pytest.mark.parametrize("mode", [{}, TERM], ids=["epoch", "term"])
async def test_the_challenger_behind_a_closed_one_takes_the_role_at_its_own_slot(mode):
    cluster = Cluster()
    leader = await lead(cluster, "a", **mode)
    busy = cluster.candidate("b", admission=closed(cluster.clock, 60), **mode)
    second = cluster.candidate("c", **mode)
    await cluster.settle()
    crash(leader)
    await cluster.until(second.done, within=LEASE + STAGGER + 1)
    assert second.result().member == "c"
    assert not busy.done()
    busy.cancel()


async def test_a_runner_campaigns_through_its_admission():
    cluster = Cluster()

    async def work(_leadership):
        await asyncio.Event().wait()

    admission = closed(cluster.clock, 5)
    runner = LeaderRunner(cluster.transport(), "billing", "a", work,
                          options=LeadershipOptions(cluster.partitions, LEASE, RENEW, STAGGER),
                          clock=cluster.clock, admission=admission)
    runner.start()
    try:
        await cluster.advance(4.9)
        assert not runner.leading
        await cluster.until(lambda: runner.leading, within=0.5)
    finally:
        await cluster.stop_runners(runner)


class Recording:
    """An open admission that keeps what it is told."""

    def __init__(self) -> None:
        self.written: list[float] = []

    def closed_for_ms(self) -> int:
        return 0

    def lease_written(self, seconds: float) -> None:
        self.written.append(seconds)


@pytest.mark.parametrize("mode", [{}, TERM], ids=["epoch", "term"])
async def test_a_tenure_tells_its_admission_of_every_lease_write_the_first_included(mode):
    cluster = Cluster()
    admission = Recording()
    leader = await lead(cluster, "a", admission=admission, **mode)
    assert admission.written == [leader.first_lease_latency]
    await cluster.advance(RENEW * 2 + 0.1)
    assert len(admission.written) == 3
    await leader.resign()

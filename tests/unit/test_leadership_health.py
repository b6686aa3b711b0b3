"""Health that means leadership: a runner that leads is healthy only while it renews.

A leader whose lease writes hang (epoch mode's transactions, term mode's
heartbeats) turns unhealthy once its renewal is overdue past the tolerance,
and healthy again as soon as they go through; a runner that does not lead
(idle, standing by, stopped) is healthy however long it waits. Time moves
only when the test moves it.
"""

from __future__ import annotations

import asyncio
import math

import pytest

from krabka.errors import ConfigurationError
from krabka.health import HealthReport, LeadershipHealth, OverdueRenewal
from krabka.options import LeadershipOptions
from krabka.runner import LeaderRunner, RunnerObserver, RunnerState
from krabka.tenure import Leadership, renewal_delay_ms
from tests.support.hanging import HangingRenewals
from tests.support.sim import LEASE, RENEW, STAGGER, Cluster

ROLE = "billing"
TOLERANCE = 0.5
MODES = {
    "epoch": LeadershipOptions(partitions=4, lease_duration=LEASE, renew_interval=RENEW,
                               challenge_stagger=STAGGER),
    "term": LeadershipOptions(partitions=4, lease_duration=LEASE, renew_interval=RENEW,
                              challenge_stagger=STAGGER, fencing="term"),
}


class Renewals(RunnerObserver):
    """The monotonic instant of every renewal the runner reports."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.at: list[int] = []

    def renewed(self, role: str, leadership: Leadership, latency: float) -> None:
        self.at.append(self.cluster.clock.monotonic_ms())


async def idle(_leadership: Leadership) -> None:
    await asyncio.Event().wait()


@pytest.fixture(params=sorted(MODES))
def options(request) -> LeadershipOptions:
    return MODES[request.param]


async def test_a_leader_whose_renewals_hang_is_unhealthy_past_the_tolerance_until_they_resume(
        options):
    cluster = Cluster()
    transport = HangingRenewals(cluster.broker)
    renewals = Renewals(cluster)
    runner = LeaderRunner(transport, ROLE, "a", idle, options=options, clock=cluster.clock,
                          observer=renewals, stop_timeout=1.0)
    health = LeadershipHealth([runner], tolerance=TOLERANCE)
    runner.start()
    try:
        await cluster.until(lambda: len(renewals.at) == 2, within=LEASE * 2)
        assert runner.state is RunnerState.LEADING
        assert health.check().healthy
        transport.block()  # right after the second renewal
        due = renewals.at[-1] + renewal_delay_ms(ROLE, "a", 2, options.renew_ms)
        # The tolerance leaves room before the fence deadline: the tenure is still live.
        assert LEASE - options.fence_margin - RENEW > TOLERANCE
        await cluster.advance((due - cluster.clock.monotonic_ms()) / 1000 + TOLERANCE - 0.01)
        assert health.check() == HealthReport(TOLERANCE)
        await cluster.advance(0.02)
        report = health.check()
        assert not report.healthy
        [late] = report.overdue
        assert (late.role, late.member) == (ROLE, "a")
        assert late.overdue == pytest.approx(TOLERANCE + 0.01)
        assert report.reasons == (
            "role 'billing' is led by 'a' but its renewal is 0.5 s overdue (tolerance 0.5 s)",)
        assert runner.leading
        transport.resume()
        await cluster.settle()
        assert health.check().healthy
        assert (runner.leading, runner.tenures) == (True, 1)  # the same tenure renewed
    finally:
        transport.resume()
        await cluster.stop_runners(runner)


async def test_a_leader_cut_off_is_healthy_throughout_at_a_tolerance_of_the_lease(options):
    """Its tenure ends at the fence deadline, sooner after the renewal was due than
    a lease: only a runner that still believes it leads after that is unhealthy."""
    cluster = Cluster()
    transport = HangingRenewals(cluster.broker)
    runner = LeaderRunner(transport, ROLE, "a", idle, options=options, clock=cluster.clock,
                          stop_timeout=1.0)
    health = LeadershipHealth([runner], tolerance=LEASE)
    runner.start()
    try:
        await cluster.until(lambda: runner.leading, within=LEASE)
        leadership = runner.leadership
        transport.block()
        while runner.state is RunnerState.LEADING:
            assert health.check().healthy
            await cluster.advance(0.01)
        assert leadership.fenced()
        assert "fence deadline" in str(leadership.err)
        for _ in range(round(LEASE * 2 / 0.1)):
            await cluster.advance(0.1)
            assert health.check().healthy
    finally:
        transport.resume()
        await cluster.stop_runners(runner)


async def test_a_leader_whose_tenure_ended_is_healthy_while_it_hands_the_role_over(options):
    cluster = Cluster()
    transport = HangingRenewals(cluster.broker)

    async def slow_to_stop(_leadership: Leadership) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            clock = cluster.clock
            await clock.sleep_until_monotonic(clock.monotonic_ms() + 500)

    runner = LeaderRunner(transport, ROLE, "a", slow_to_stop, options=options,
                          clock=cluster.clock, stop_timeout=1.0)
    health = LeadershipHealth([runner], tolerance=TOLERANCE)
    runner.start()
    try:
        await cluster.until(lambda: runner.running, within=LEASE)
        transport.block()
        await cluster.until(lambda: not health.check().healthy, within=LEASE)
        await cluster.until(lambda: runner.state is not RunnerState.LEADING, within=LEASE)
        assert runner.state is RunnerState.HANDING_OVER  # the function takes 0.5 s to stop
        assert runner.leadership is not None
        assert runner.leadership.renewal_overdue() > TOLERANCE
        assert health.check().healthy
    finally:
        transport.resume()
        await cluster.stop_runners(runner)


async def test_a_runner_that_does_not_lead_is_healthy_idle_standing_by_and_stopped(options):
    cluster = Cluster()
    leader = LeaderRunner(cluster.transport(), ROLE, "a", idle, options=options,
                          clock=cluster.clock, stop_timeout=1.0)
    standby = LeaderRunner(cluster.transport(), ROLE, "b", idle, options=options,
                           clock=cluster.clock, stop_timeout=1.0)
    health = LeadershipHealth([standby], tolerance=TOLERANCE)
    assert health.check().healthy  # idle
    leader.start()
    try:
        await cluster.until(lambda: leader.leading, within=LEASE)
        standby.start()
        for _ in range(round(LEASE * 5 / TOLERANCE)):
            await cluster.advance(TOLERANCE)
            assert standby.state is RunnerState.CAMPAIGNING
            assert health.check().healthy
        await cluster.stop_runners(standby)
        assert standby.state is RunnerState.STOPPED
        assert health.check().healthy
    finally:
        await cluster.stop_runners(leader, standby)


async def test_the_report_names_only_the_leaders_that_are_overdue():
    cluster = Cluster()
    hanging = HangingRenewals(cluster.broker)
    options = MODES["epoch"]
    stuck = LeaderRunner(hanging, "billing", "a", idle, options=options, clock=cluster.clock,
                         stop_timeout=1.0)
    renewing = LeaderRunner(cluster.transport(), "shipping", "a", idle, options=options,
                            clock=cluster.clock, stop_timeout=1.0)
    runners = {"billing": stuck}
    health = LeadershipHealth(runners.values(), tolerance=TOLERANCE)
    runners["shipping"] = renewing  # a live view: a runner added later is checked too
    stuck.start()
    renewing.start()
    try:
        await cluster.until(lambda: stuck.leading and renewing.leading, within=LEASE)
        hanging.block()
        await cluster.advance(RENEW + TOLERANCE + 0.01)
        assert [late.role for late in health.check().overdue] == ["billing"]
        hanging.resume()
        await cluster.settle()
        assert health.check().healthy
    finally:
        hanging.resume()
        await cluster.stop_runners(stuck, renewing)


@pytest.mark.parametrize("tolerance", [0.0, -1.0, math.nan, math.inf])
def test_a_tolerance_that_is_not_a_positive_number_of_seconds_is_refused(tolerance):
    with pytest.raises(ConfigurationError, match="health tolerance must be a positive"):
        LeadershipHealth([], tolerance=tolerance)


def test_a_report_with_nothing_overdue_is_healthy_and_gives_no_reasons():
    assert HealthReport(1.0).healthy
    assert HealthReport(1.0).reasons == ()
    late = OverdueRenewal("billing", "a", 2.25)
    assert not HealthReport(1.0, (late,)).healthy

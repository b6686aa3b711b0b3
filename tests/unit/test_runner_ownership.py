"""A runner's tenure always has an owner, and the runner never gives up.

Once a `Leadership` exists, every way out of the runner (a stop, a step-down,
the function's end, a cancellation of the runner's task at any moment of a
hand-over) stops the function and then resigns, so the role never stays held
by a tenure that renews with no function and nobody to stop it. A callback's
error (an observer's, an admission's) is logged and ends nothing. A function
that ignores its cancellation never runs beside a second copy of itself in
the same process. The back-off is defined for an outage of any length and is
jittered, so a process's runners do not retry in lockstep.
"""

from __future__ import annotations

import asyncio
import logging
import random

import pytest

from krabka import (
    LeaderRunner,
    Leadership,
    LeadershipOptions,
    RunnerObserver,
    RunnerState,
    TenureState,
    TransportError,
    acquire_leadership,
    describe_leadership,
    describe_role_state,
)
from krabka.runner import backoff_delay
from krabka.testing import MemoryTransport
from tests.support.sim import LEASE, RENEW, STAGGER, Cluster

ROLE = "billing"
OPTIONS = LeadershipOptions(partitions=4, lease_duration=LEASE, renew_interval=RENEW,
                            challenge_stagger=STAGGER)
STOP_TIMEOUT = 1.0


class Tenures(RunnerObserver):
    """Keeps every tenure the runner was elected to."""

    def __init__(self) -> None:
        self.elected_to: list[Leadership] = []

    def elected(self, role: str, leadership: Leadership) -> None:
        self.elected_to.append(leadership)


class RaisingObserver(Tenures):
    """An observer with a bug in every method it overrides."""

    def elected(self, role: str, leadership: Leadership) -> None:
        super().elected(role, leadership)
        raise KeyError("a metrics label that is missing")

    def fenced(self, role: str, leadership: Leadership) -> None:
        raise KeyError("a metrics label that is missing")

    def resigned(self, role: str, leadership: Leadership) -> None:
        raise KeyError("a metrics label that is missing")

    def lost(self, role: str, leadership: Leadership, stop: object) -> None:
        raise KeyError("a metrics label that is missing")


class Copies:
    """Role functions that count how many copies run at once.

    With `stubborn`, a copy ignores its cancellation until `release` is set;
    with `slow_stop_ms`, it takes that long (clock time) to stop once cancelled.
    """

    def __init__(self, cluster: Cluster, *, stubborn: bool = False, slow_stop_ms: int = 0):
        self.cluster = cluster
        self.stubborn = stubborn
        self.slow_stop_ms = slow_stop_ms
        self.release = asyncio.Event()
        self.running = 0
        self.most = 0
        self.starts = 0

    async def function(self, _leadership: Leadership) -> None:
        self.running += 1
        self.starts += 1
        self.most = max(self.most, self.running)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            clock = self.cluster.clock
            if self.slow_stop_ms:
                await clock.sleep_until_monotonic(clock.monotonic_ms() + self.slow_stop_ms)
            if self.stubborn:
                await self.release.wait()
            raise
        finally:
            self.running -= 1


def runner(cluster: Cluster, fn, observer: RunnerObserver | None = None,
           transport: MemoryTransport | None = None, **kw) -> LeaderRunner:
    return LeaderRunner(transport or cluster.transport(), ROLE, "a", fn, options=OPTIONS,
                        clock=cluster.clock, observer=observer or Tenures(),
                        stop_timeout=STOP_TIMEOUT, **kw)


async def handed_back(cluster: Cluster, tenure: Leadership) -> bool:
    """Whether `tenure` no longer holds the role: its token is not the
    coordinator's and no lease of the role stands."""
    status = await describe_leadership(cluster.transport(), ROLE)
    state = await describe_role_state(cluster.transport(), ROLE, OPTIONS.partitions)
    return not status.authoritative(tenure.token) and state.lease is None


# Every way out of a tenure hands it back.


@pytest.mark.parametrize("how", ["step-down", "stop"])
async def test_a_runner_cancelled_while_it_hands_over_still_resigns_then_raises_the_cancellation(
        how):
    """The function takes a while to stop; the runner's task is cancelled in
    the middle of the hand-over. The hand-over goes on to the resignation,
    and only then does the task end, cancelled."""
    cluster = Cluster()
    observer = Tenures()
    copies = Copies(cluster, slow_stop_ms=500)
    lead = runner(cluster, copies.function, observer)
    task = lead.start()
    await cluster.until(lambda: lead.state is RunnerState.LEADING, within=2)
    tenure = observer.elected_to[0]
    if how == "step-down":
        lead.step_down()
    else:
        stopping = asyncio.ensure_future(lead.stop())
    await cluster.until(lambda: lead.state is RunnerState.HANDING_OVER, within=1)
    task.cancel()
    await cluster.until(task.done, within=2 * STOP_TIMEOUT + 1)
    assert task.cancelled()
    assert copies.running == 0
    assert tenure.state is TenureState.ENDED
    assert await handed_back(cluster, tenure)
    assert lead.leadership is None
    assert not lead.leading
    if how == "stop":
        await cluster.until(stopping.done, within=1)


async def test_a_runner_cancelled_while_it_leads_stops_the_function_and_resigns():
    cluster = Cluster()
    observer = Tenures()
    copies = Copies(cluster, slow_stop_ms=300)
    lead = runner(cluster, copies.function, observer)
    task = lead.start()
    await cluster.until(lambda: copies.running == 1, within=2)
    task.cancel()
    await cluster.settle()
    task.cancel()  # a second cancellation while it hands over changes nothing
    await cluster.until(task.done, within=2 * STOP_TIMEOUT + 1)
    assert task.cancelled()
    assert copies.running == 0
    assert observer.elected_to[0].state is TenureState.ENDED
    assert await handed_back(cluster, observer.elected_to[0])


async def test_an_observer_whose_every_method_raises_changes_nothing_the_runner_does(caplog):
    cluster = Cluster()
    observer = RaisingObserver()
    copies = Copies(cluster)
    lead = runner(cluster, copies.function, observer)
    lead.start()
    with caplog.at_level(logging.ERROR, logger="krabka.runtime.callbacks"):
        await cluster.until(lambda: copies.running == 1, within=2)
        assert lead.leading
        assert "the observer's elected failed" in caplog.text
        # A fence: another process of this member mints the role's epoch.
        other = cluster.transport()
        await other.acquire_epoch(ROLE, LEASE)
        await cluster.until(lambda: len(observer.elected_to) == 2, within=3 * LEASE)
        assert observer.elected_to[0].state is not TenureState.LEADING
        assert "the observer's fenced failed" in caplog.text
        lead.step_down()
        await cluster.until(lambda: len(observer.elected_to) == 3, within=3 * LEASE)
        assert "the observer's resigned failed" in caplog.text
    assert lead.state is RunnerState.LEADING
    await cluster.stop_runners(lead)
    assert all(t.state is not TenureState.LEADING for t in observer.elected_to)
    assert await handed_back(cluster, observer.elected_to[-1])


async def test_a_standby_leads_within_a_lease_when_the_leaders_observer_raises_on_elected():
    cluster = Cluster()
    observer = RaisingObserver()
    leader = runner(cluster, Copies(cluster).function, observer)
    leader.start()
    await cluster.until(lambda: leader.leading, within=2)
    standby_copies = Copies(cluster)
    standby = LeaderRunner(cluster.transport(), ROLE, "b", standby_copies.function,
                           options=OPTIONS, clock=cluster.clock, stop_timeout=STOP_TIMEOUT)
    standby.start()
    await cluster.advance(RENEW)
    leader.step_down()
    await cluster.until(lambda: standby.leading, within=LEASE)
    assert standby_copies.running == 1
    await cluster.stop_runners(leader, standby)


async def test_an_admission_that_raises_on_the_first_lease_still_hands_the_tenure_over(caplog):
    class Broken:
        def closed_for_ms(self) -> int:
            return 0

        def lease_written(self, seconds: float) -> None:
            raise ValueError("a gauge of the wrong type")

    cluster = Cluster()
    with caplog.at_level(logging.ERROR, logger="krabka.runtime.callbacks"):
        leadership = await acquire_leadership(cluster.transport(), ROLE, "a", options=OPTIONS,
                                              clock=cluster.clock, admission=Broken())
        await cluster.advance(RENEW * 2)
    assert leadership.state is TenureState.LEADING
    assert "the admission's lease_written failed" in caplog.text
    await leadership.resign()
    assert await handed_back(cluster, leadership)


async def test_leading_is_false_as_soon_as_the_hand_over_begins():
    cluster = Cluster()
    copies = Copies(cluster, slow_stop_ms=500)
    lead = runner(cluster, copies.function)
    lead.start()
    await cluster.until(lambda: lead.leading, within=2)
    lead.step_down()
    await cluster.until(lambda: lead.state is RunnerState.HANDING_OVER, within=1)
    assert copies.running == 1
    assert lead.leadership is not None
    assert not lead.leadership.fenced()
    assert not lead.leading
    await cluster.stop_runners(lead)


async def test_a_stop_that_comes_while_a_fenced_tenure_is_handed_over_deregisters():
    cluster = Cluster()
    copies = Copies(cluster, slow_stop_ms=500)
    lead = runner(cluster, copies.function)
    lead.start()
    await cluster.until(lambda: lead.leading, within=2)
    await cluster.transport().acquire_epoch(ROLE, LEASE)  # fences the tenure
    await cluster.until(lambda: lead.state is RunnerState.HANDING_OVER, within=LEASE)
    stopping = asyncio.ensure_future(lead.stop())
    await cluster.until(stopping.done, within=3 * STOP_TIMEOUT)
    state = await describe_role_state(cluster.transport(), ROLE, OPTIONS.partitions)
    assert state.roster == []


# One process never runs two copies.


async def test_a_function_that_ignores_its_cancellation_is_never_joined_by_a_second_copy(caplog):
    cluster = Cluster()
    copies = Copies(cluster, stubborn=True)
    observer = Tenures()
    lead = runner(cluster, copies.function, observer)
    lead.start()
    await cluster.until(lambda: copies.running == 1, within=2)
    with caplog.at_level(logging.ERROR, logger="krabka.runner"):
        lead.step_down()
        await cluster.until(lambda: lead.state is RunnerState.AWAITING_FUNCTION,
                            within=2 * STOP_TIMEOUT + 1)
        # Resigned without it: the role is free for other members.
        assert await handed_back(cluster, observer.elected_to[0])
        await cluster.advance(10 * LEASE)
    assert copies.starts == 1
    assert lead.state is RunnerState.AWAITING_FUNCTION
    assert lead.running
    assert caplog.text.count("does not stand for the role until it ends") >= 10 * LEASE - 1
    copies.release.set()
    await cluster.until(lambda: copies.starts == 2, within=2 * LEASE)
    assert copies.most == 1
    await copies_stop(cluster, lead, copies)


async def copies_stop(cluster: Cluster, lead: LeaderRunner, copies: Copies) -> None:
    copies.release.set()
    await cluster.stop_runners(lead)


async def test_a_runner_stopped_while_its_function_ignores_cancellation_ends_and_logs_its_end(
        caplog):
    cluster = Cluster()
    copies = Copies(cluster, stubborn=True)
    lead = runner(cluster, copies.function)
    lead.start()
    await cluster.until(lambda: copies.running == 1, within=2)
    await cluster.stop_runners(lead, within=3 * STOP_TIMEOUT)
    assert lead.state is RunnerState.STOPPED
    assert lead.running
    with caplog.at_level(logging.WARNING, logger="krabka.runner"):
        copies.release.set()
        await cluster.settle()
    assert not lead.running
    assert "ignored its cancellation has ended" in caplog.text


# The back-off.


def test_the_back_off_is_defined_for_any_number_of_failures_and_never_passes_its_cap():
    rng = random.Random(1)
    for failures in [1, 2, 10, 1_024, 1_025, 10**6, 10**12]:
        delay = backoff_delay(failures, 1.0, 30.0, rng)
        assert 1.0 <= delay <= 30.0


def test_the_back_off_starts_at_the_first_interval_and_spreads_runners_apart():
    assert backoff_delay(1, 0.5, 30.0, random.Random(7)) == 0.5
    delays = {round(backoff_delay(8, 1.0, 30.0, random.Random(f"role-{n}")), 3)
              for n in range(50)}
    assert len(delays) > 40
    assert all(1.0 <= d <= 30.0 for d in delays)


class Outage(MemoryTransport):
    """A client that cannot reach the broker while `down`."""

    down = True

    async def check_topic(self, partitions, lease_duration):
        if self.down:
            raise TransportError("broker unreachable")
        return await super().check_topic(partitions, lease_duration)

    async def read_partition(self, partition, from_offset=0):
        if self.down:
            raise TransportError("broker unreachable")
        return await super().read_partition(partition, from_offset)


async def test_a_runner_campaigns_through_ten_hours_without_a_broker_then_leads():
    cluster = Cluster()
    transport = Outage(cluster.broker)
    failed: list[BaseException] = []

    class Failures(RunnerObserver):
        def campaign_failed(self, role: str, error: BaseException) -> None:
            failed.append(error)

    lead = runner(cluster, Copies(cluster).function, Failures(), transport=transport,
                  retry_interval=0.05, max_backoff=2.0)
    task = lead.start()
    await cluster.advance(10 * 3600, step_ms=1000)
    assert not task.done()
    assert lead.state is RunnerState.BACKING_OFF
    # About one campaign per second over ten hours: well past the count at
    # which an unbounded exponent overflows.
    assert len(failed) > 1_100
    transport.down = False
    await cluster.until(lambda: lead.leading, within=2.0 + 1)
    await cluster.stop_runners(lead)


async def test_a_new_runner_of_the_role_waits_for_the_copy_a_cancelled_runner_left_running():
    cluster = Cluster()
    copies = Copies(cluster, stubborn=True)
    first = runner(cluster, copies.function)
    task = first.start()
    await cluster.until(lambda: copies.running == 1, within=2)
    task.cancel()
    await cluster.until(task.done, within=3 * STOP_TIMEOUT)
    assert copies.running == 1  # it ignored the cancellation and runs on
    second = runner(cluster, copies.function)
    second.start()
    await cluster.advance(5 * LEASE)
    assert second.state is RunnerState.AWAITING_FUNCTION
    assert copies.starts == 1
    copies.release.set()
    await cluster.until(lambda: copies.starts == 2, within=2 * LEASE)
    assert copies.most == 1
    await cluster.stop_runners(second)

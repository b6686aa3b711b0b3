"""Role runners on the in-process model: the function runs only while leading and
is cancelled on a fence or at the fence deadline; a clean stop resigns."""

from __future__ import annotations

import asyncio

import pytest

from agents.roles import MetricsObserver, RoleRunner, declare
from app.factory import create_app
from app.install import install
from app.metrics import Metrics
from app.settings import Settings
from krabka import (
    STATE_TOPIC,
    Leadership,
    LeadershipOptions,
    RenewalLatencyAdmission,
    RunnerState,
    TransportError,
    describe_leadership,
    describe_role_state,
)
from krabka.testing import MemoryBroker, MemoryTransport
from tests.support.polling import eventually
from tests.support.sim import LEASE, RENEW, STAGGER, Cluster

ROLE = "billing"
OPTIONS = LeadershipOptions(partitions=4, lease_duration=LEASE, renew_interval=RENEW,
                            challenge_stagger=STAGGER)


class Probe:
    """A role function that records when it runs and how it ends."""

    def __init__(self, clock) -> None:
        self.clock = clock
        self.started: list[tuple[str, int]] = []
        self.cancelled: list[tuple[str, int]] = []
        self.running: set[str] = set()

    def for_member(self, member: str):
        async def work(leadership: Leadership) -> None:
            assert leadership.member == member
            self.started.append((member, self.clock.now_ms()))
            self.running.add(member)
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled.append((member, self.clock.now_ms()))
                raise
            finally:
                self.running.discard(member)
        return work


class CutTransport(MemoryTransport):
    """A process whose link to the broker can be cut: every call then fails."""

    cut = False

    def _check(self) -> None:
        if self.cut:
            raise TransportError("broker unreachable")

    async def begin_transaction(self, role, token):
        self._check()
        return await super().begin_transaction(role, token)

    async def append(self, partition, key, value):
        self._check()
        return await super().append(partition, key, value)

    async def acquire_epoch(self, role, transaction_timeout, current=None):
        self._check()
        return await super().acquire_epoch(role, transaction_timeout, current)


def runner(cluster: Cluster, member: str, fn, transport=None) -> RoleRunner:
    r = RoleRunner(transport or cluster.transport(), ROLE, fn, member, OPTIONS,
                   clock=cluster.clock, stop_timeout=1.0, retry_interval=0.5)
    r.start()
    return r


async def stop_all(cluster: Cluster, *runners: RoleRunner) -> None:
    stops = [asyncio.create_task(r.stop()) for r in runners]
    await cluster.until(lambda: all(s.done() for s in stops), within=30)


async def test_the_function_runs_only_on_the_leader():
    cluster = Cluster()
    probe = Probe(cluster.clock)
    a = runner(cluster, "a", probe.for_member("a"))
    await cluster.until(lambda: probe.running == {"a"}, within=2)
    b = runner(cluster, "b", probe.for_member("b"))
    await cluster.advance(LEASE * 5)
    assert probe.running == {"a"}
    assert [m for m, _ in probe.started] == ["a"]
    assert a.leading
    assert not b.leading
    await stop_all(cluster, a, b)


async def test_a_fence_cancels_the_function_and_another_member_takes_over():
    cluster = Cluster()
    probe = Probe(cluster.clock)
    a = runner(cluster, "a", probe.for_member("a"))
    await cluster.until(lambda: a.leading, within=2)
    b = runner(cluster, "b", probe.for_member("b"))
    await cluster.settle()
    # An operator's unconditional InitProducerId deposes a at once.
    await cluster.transport().acquire_epoch(ROLE, LEASE)
    await cluster.until(lambda: "a" in [m for m, _ in probe.cancelled], within=RENEW + 1)
    assert "a" not in probe.running
    await cluster.until(lambda: probe.running == {"b"}, within=LEASE * 3)
    await stop_all(cluster, a, b)


async def test_a_leader_cut_off_from_the_broker_stops_its_function_at_the_fence_deadline():
    cluster = Cluster()
    probe = Probe(cluster.clock)
    transport = CutTransport(cluster.broker)
    a = runner(cluster, "a", probe.for_member("a"), transport)
    await cluster.until(lambda: a.leading, within=2)
    leadership = a.leadership
    assert leadership is not None
    transport.cut = True
    await cluster.until(lambda: probe.cancelled, within=LEASE * 2, step_ms=5)
    fence_deadline = leadership.fence_deadline
    member, at = probe.cancelled[0]
    assert member == "a"
    assert fence_deadline <= at <= fence_deadline + 10  # within one clock step
    assert at < leadership.lease.deadline
    assert a.last_stop is not None
    assert a.last_stop.reason == "fenced"
    assert a.last_stop.fence_deadline == fence_deadline
    assert "fence deadline" in a.last_stop.error
    assert not a.running
    transport.cut = False
    await stop_all(cluster, a)


async def test_a_clean_stop_resigns_and_hands_over_before_the_deadline():
    cluster = Cluster()
    probe = Probe(cluster.clock)
    a = runner(cluster, "a", probe.for_member("a"))
    await cluster.until(lambda: a.leading, within=2)
    b = runner(cluster, "b", probe.for_member("b"))
    await cluster.settle()
    old = a.leadership
    assert old is not None
    deadline = old.lease.deadline
    await stop_all(cluster, a)
    assert "a" in [m for m, _ in probe.cancelled]
    reader = cluster.transport()
    status = await describe_leadership(reader, ROLE)
    assert not status.authoritative(old.token)  # the conditional bump retired the token
    await cluster.until(lambda: b.leading, within=LEASE)
    assert cluster.clock.now_ms() < deadline
    state = await describe_role_state(reader, ROLE, OPTIONS.partitions)
    assert state.holder == "b"
    assert "a" not in state.roster  # a clean stop deregisters
    await stop_all(cluster, b)


async def test_a_clean_stop_cancels_the_function_first_and_its_open_transaction_aborts():
    cluster = Cluster()
    inside = asyncio.Event()
    seen_at_cancel: list[object] = []

    async def writer(leadership: Leadership) -> None:
        async with leadership.transaction() as txn:
            await txn.send("out", b"half a batch")
            inside.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                # The role is still ours when the function is cancelled: no
                # tombstone yet, so no successor can have started.
                seen_at_cancel.append(
                    (await describe_role_state(cluster.transport(), ROLE,
                                               OPTIONS.partitions)).holder)
                raise

    a = runner(cluster, "a", writer)
    await cluster.until(inside.is_set, within=2)
    stopping = asyncio.create_task(a.stop())
    await cluster.until(stopping.done, within=5)
    assert seen_at_cancel == ["a"]
    assert cluster.out_values() == []  # the open transaction was aborted
    state = await describe_role_state(cluster.transport(), ROLE, OPTIONS.partitions)
    assert state.lease is None  # then the tombstone committed
    assert a.last_stop is not None
    assert a.last_stop.reason == "stopped"


async def test_a_failing_function_resigns_so_another_member_leads():
    cluster = Cluster()
    probe = Probe(cluster.clock)

    async def broken(leadership: Leadership) -> None:
        raise RuntimeError("boom")

    a = runner(cluster, "a", broken)
    await cluster.until(lambda: a.tenures >= 1, within=2)
    b = runner(cluster, "b", probe.for_member("b"))
    await cluster.until(lambda: probe.running == {"b"}, within=LEASE * 3)
    await stop_all(cluster, a, b)


async def test_a_stopped_candidate_deregisters():
    cluster = Cluster()
    probe = Probe(cluster.clock)
    a = runner(cluster, "a", probe.for_member("a"))
    await cluster.until(lambda: a.leading, within=2)
    b = runner(cluster, "b", probe.for_member("b"))
    await cluster.advance(1)
    await stop_all(cluster, b)
    state = await describe_role_state(cluster.transport(), ROLE, OPTIONS.partitions)
    assert state.roster == ["a"]
    await stop_all(cluster, a)


def test_the_decorator_registers_async_functions_once():
    registry: dict = {}

    @declare(registry, "x")
    async def work(leadership):
        pass

    assert registry == {"x": work}
    with pytest.raises(TypeError):
        declare(registry, "y")(lambda leadership: None)
    with pytest.raises(ValueError, match="twice"):
        @declare(registry, "x")
        async def other(leadership):
            pass
    with pytest.raises(ValueError, match="empty"):
        declare(registry, "")


async def test_the_metrics_count_the_first_lease_and_every_renewal():
    cluster = Cluster()
    probe = Probe(cluster.clock)
    metrics = Metrics()
    a = RoleRunner(cluster.transport(), ROLE, probe.for_member("a"), "a", OPTIONS,
                   clock=cluster.clock, observer=MetricsObserver(metrics))
    labels = {"role": ROLE}

    def value(name: str, **extra: str) -> float | None:
        return metrics.registry.get_sample_value(name, {**labels, **extra})

    a.start()
    await cluster.until(lambda: a.leading, within=2)
    assert value("coordination_lease_write_seconds_count") == 1  # the first lease
    assert value("coordination_elections_total") == 1
    await cluster.advance(RENEW * 3 + 0.1)
    assert value("coordination_lease_write_seconds_count") == 4
    assert value("coordination_roles_held") == 1
    await stop_all(cluster, a)
    assert value("coordination_roles_held") == 0
    assert value("coordination_resignations_total") == 1
    assert value("coordination_tenures_lost_total", reason="stopped") == 1
    assert value("coordination_fences_total") is None  # never fenced: no series


@pytest.mark.parametrize(("limit", "rate"), [(1.5, 20.0), (1.5, 0.0), (0.0, 0.0)])
async def test_a_worker_gives_all_its_runners_one_admission_of_its_settings(limit, rate):
    broker = MemoryBroker()
    broker.create_topic(STATE_TOPIC, 4)
    settings = Settings(partitions=4, member_id="a", app_id="test-admission",
                        admission_limit=limit, admission_rate=rate)

    async def idle(_leadership):
        await asyncio.Event().wait()

    installation = install(create_app(settings, store="memory://"), settings,
                           transport_factory=lambda: MemoryTransport(broker))
    for name in ("x", "y"):
        installation.role(name)(idle)
    service = installation.service
    service._assigned.set()  # the partition assignment a worker waits for first
    await service._connect_and_run()
    try:
        admissions = [runner.admission for runner in installation.context.runners.values()]
        assert len(admissions) == 2
        if not limit:
            assert admissions == [None, None]
            return
        admission = admissions[0]
        assert admissions[1] is admission
        assert isinstance(admission, RenewalLatencyAdmission)
        assert (admission.limit_ms, admission.hold_ms) == (1500, 10_000)  # hold: renew interval
        assert admission.rate == (rate or None)
    finally:
        await service.resign_all()


@pytest.mark.parametrize("placement", ["registration", "balanced"])
async def test_a_worker_whose_resignation_is_cancelled_resigns_every_role_then_is_cancelled(
    placement,
):
    """The cancellation of a stop that is resigning the roles reaches the stop once
    every role is handed back: neither the roles nor the cancellation are lost."""
    broker = MemoryBroker()
    broker.create_topic(STATE_TOPIC, 4)
    settings = Settings(partitions=4, member_id="a", app_id="test-resign-cancelled",
                        placement=placement)

    async def idle(_leadership):
        await asyncio.Event().wait()

    installation = install(create_app(settings, store="memory://"), settings,
                           transport_factory=lambda: MemoryTransport(broker))
    for name in ("x", "y"):
        installation.role(name)(idle)
    service = installation.service
    service._assigned.set()  # the partition assignment a worker waits for first
    await service._connect_and_run()
    runners = installation.context.runners

    async def leading() -> list[bool]:
        return [runner.leading for runner in runners.values()]

    await eventually(leading, all, within=10)
    resigning = asyncio.ensure_future(service.resign_all())
    await asyncio.sleep(0)  # the resignation's first step has begun and awaits
    assert not resigning.done()
    resigning.cancel()
    await asyncio.wait({resigning}, timeout=30)
    assert resigning.cancelled()
    assert {name: runner.state for name, runner in runners.items()} == {
        "x": RunnerState.STOPPED, "y": RunnerState.STOPPED}
    assert installation.context.transport is None
    await service.resign_all()  # done once: a later call returns at once

"""The worker's metrics: one Prometheus registry per worker, with the process
figures, the coordination figures as events happen, the fold lag and the
readiness verdict read at each scrape, the build's versions, and Faust's sensor
figures recorded on the same registry; the series each role costs, labelled by
role or, above the per-role limit, not."""

from __future__ import annotations

import asyncio
import platform
from collections import Counter

import aiokafka
import faust
import pytest
from faust.types import TP
from prometheus_client.parser import text_string_to_metric_families

from agents.roles import MetricsObserver, RoleRunner
from app.factory import build, create_app
from app.install import install
from app.metrics import BUILD_INFO, FOLD_LAG, READY, Cardinality, Metrics
from app.settings import Settings
from krabka import InvalidStateError, Leadership, LeadershipOptions
from krabka.defaults import STATE_TOPIC
from krabka.runtime.versions import installed_version
from krabka.testing import ManualClock, MemoryBroker, MemoryTransport
from tests.support.polling import eventually
from tests.support.sim import LEASE, RENEW, STAGGER, Cluster

ROLE = "billing"
OPTIONS = LeadershipOptions(partitions=4, lease_duration=LEASE, renew_interval=RENEW,
                            challenge_stagger=STAGGER)


def sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def rendered(metrics: Metrics) -> dict[str, float]:
    """Every sample `render` exports, as ``name{labels}`` -> value."""
    out = {}
    for family in text_string_to_metric_families(metrics.render()[0].decode()):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


def test_the_process_figures_are_on_every_workers_registry():
    figures = rendered(Metrics())
    assert figures["process_open_fds"] > 0
    assert figures["process_resident_memory_bytes"] > 0
    assert "process_cpu_seconds_total" in figures
    assert any(name.startswith("python_info{") for name in figures)
    assert any(name.startswith("python_gc_collections_total{") for name in figures)


def test_each_worker_counts_its_own_figures():
    a, b = Metrics(), Metrics()
    a.leading(ROLE, True)
    assert sample(a, "coordination_elections_total", role=ROLE) == 1
    assert sample(b, "coordination_elections_total", role=ROLE) is None
    assert sample(b, "process_open_fds") is not None  # each registry has its own collectors


def test_the_coordination_figures_follow_the_events():
    m = Metrics()
    m.stand_for([ROLE], per_role_limit=1)
    assert sample(m, "coordination_roles_held", role=ROLE) == 0
    m.leading(ROLE, True)
    m.lease_written(ROLE, 0.004)
    m.lease_written(ROLE, 0.3)
    assert sample(m, "coordination_roles_held", role=ROLE) == 1
    assert sample(m, "coordination_elections_total", role=ROLE) == 1
    assert sample(m, "coordination_lease_write_seconds_bucket", role=ROLE, le="0.005") == 1
    assert sample(m, "coordination_lease_write_seconds_bucket", role=ROLE, le="0.5") == 2
    assert sample(m, "coordination_lease_write_seconds_count", role=ROLE) == 2
    assert sample(m, "coordination_lease_write_seconds_sum", role=ROLE) == pytest.approx(0.304)
    m.fenced(ROLE)
    m.lost(ROLE, "fenced")
    assert sample(m, "coordination_roles_held", role=ROLE) == 0
    assert sample(m, "coordination_fences_total", role=ROLE) == 1
    assert sample(m, "coordination_tenures_lost_total", role=ROLE, reason="fenced") == 1
    m.leading(ROLE, True)
    m.resigned(ROLE)
    m.lost(ROLE, "stopped")
    assert sample(m, "coordination_elections_total", role=ROLE) == 2
    assert sample(m, "coordination_resignations_total", role=ROLE) == 1
    assert sample(m, "coordination_tenures_lost_total", role=ROLE, reason="stopped") == 1
    m.event("elected")
    m.event("elected")
    m.skip(3, "undecodable-key")
    assert sample(m, "coordination_events_total", kind="elected") == 2
    assert sample(m, "coordination_skipped_records_total", partition="3",
                  reason="undecodable-key") == 1


def test_the_fold_lag_is_read_from_its_source_at_each_scrape():
    m = Metrics()
    assert not any(name.startswith(FOLD_LAG) for name in rendered(m))  # no source yet
    lags = {0: 12, 2: 3}
    m.follow_fold_lag(lambda: lags)
    figures = rendered(m)
    assert figures[f'{FOLD_LAG}{{partition="0"}}'] == 12
    assert figures[f'{FOLD_LAG}{{partition="2"}}'] == 3
    lags[0] = 2
    del lags[2]
    figures = rendered(m)
    assert figures[f'{FOLD_LAG}{{partition="0"}}'] == 2
    assert f'{FOLD_LAG}{{partition="2"}}' not in figures


def test_readiness_is_read_from_its_source_at_each_scrape():
    m = Metrics()
    assert READY not in rendered(m)  # no source yet
    ready = [False]
    m.follow_readiness(lambda: ready[0])
    assert rendered(m)[READY] == 0
    ready[0] = True
    assert rendered(m)[READY] == 1


def test_a_built_worker_exports_the_verdict_of_get_ready():
    clock = ManualClock()
    broker = MemoryBroker(clock=clock)
    broker.create_topic(STATE_TOPIC, 4)
    settings = Settings(partitions=4, app_id="test-metrics-ready", member_id="m")
    ctx = build(settings, store="memory://", roles={}, clock=clock,
                transport_factory=lambda: MemoryTransport(broker))
    assert rendered(ctx.metrics)[READY] == 0  # no transport, no answer from the cluster
    ctx.transport = MemoryTransport(broker)
    ctx.cluster.answered({p: 0 for p in range(4)})
    assert rendered(ctx.metrics)[READY] == 1
    clock.advance(settings.ready_cluster_timeout + 0.1)  # the cluster silent too long
    assert rendered(ctx.metrics)[READY] == 0


def test_the_build_info_names_the_versions_the_worker_runs():
    (name,) = [n for n in rendered(Metrics()) if n.startswith(BUILD_INFO + "{")]
    assert rendered(Metrics())[name] == 1
    labels = {"aiokafka": aiokafka.__version__, "faust": faust.__version__,
              "python": platform.python_version(), "version": installed_version()}
    assert name == BUILD_INFO + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"
    assert installed_version() != "unknown (not installed)"  # the editable install's


def test_a_built_worker_records_fausts_sensor_figures_on_its_own_registry():
    ctx = build(Settings(partitions=4, app_id="test-metrics", member_id="m"),
                store="memory://", roles={}, transport_factory=MemoryTransport)
    monitor = ctx.app.monitor
    tp = TP("some-topic", 1)
    monitor.track_tp_end_offset(tp, 42)
    monitor.on_tp_commit({tp: 40})
    monitor.on_commit_completed(ctx.app.consumer, monitor.on_commit_initiated(ctx.app.consumer))
    metrics = ctx.metrics
    labels = {"topic": "some-topic", "partition": "1"}
    assert sample(metrics, "faust_topic_partition_end_offset", **labels) == 42
    assert sample(metrics, "faust_topic_partition_offset_commited", **labels) == 40
    assert sample(metrics, "faust_consumer_commit_latency_count") == 1
    assert sample(metrics, "faust_total_rebalances") == 0
    assert sample(Metrics(), "faust_consumer_commit_latency_count") == 0  # not another's


async def test_a_runner_feeds_elections_fences_and_lost_tenures():
    cluster = Cluster()
    metrics = Metrics()
    observer = MetricsObserver(metrics)

    async def work(leadership: Leadership) -> None:
        await asyncio.Event().wait()

    a = RoleRunner(cluster.transport(), ROLE, work, "a", OPTIONS, clock=cluster.clock,
                   observer=observer, retry_interval=0.5)
    a.start()
    await cluster.until(lambda: a.leading, within=2)
    assert sample(metrics, "coordination_roles_held", role=ROLE) == 1
    # An operator's unconditional InitProducerId deposes the leader at once.
    await cluster.transport().acquire_epoch(ROLE, LEASE)
    await cluster.until(lambda: sample(metrics, "coordination_fences_total", role=ROLE) == 1,
                        within=RENEW + 1)
    await cluster.until(lambda: not a.running, within=2)
    assert sample(metrics, "coordination_roles_held", role=ROLE) == 0
    assert sample(metrics, "coordination_tenures_lost_total", role=ROLE, reason="fenced") == 1
    assert sample(metrics, "coordination_resignations_total", role=ROLE) is None
    stop = asyncio.create_task(a.stop())
    await cluster.until(stop.done, within=30)


REASONS = ("fenced", "stopped", "stepped-down", "returned", "failed")


def series_by_role(metrics: Metrics) -> Counter[str]:
    """How many samples `render` exports with each ``role`` label (``_created``
    samples included: a scraper stores each as a series of its own)."""
    body, _ = metrics.render()
    return Counter(s.labels["role"] for family in text_string_to_metric_families(body.decode())
                   for s in family.samples if "role" in s.labels)


ROLE_FIGURES = ("coordination_elections", "coordination_fences", "coordination_resignations",
                "coordination_tenures_lost", "coordination_lease_write_seconds")
"""The role figures but the held gauge: labelled by role in the per-role mode only."""


def role_figure_series(metrics: Metrics) -> int:
    """How many samples of the `ROLE_FIGURES` `render` exports."""
    body, _ = metrics.render()
    return sum(1 for family in text_string_to_metric_families(body.decode())
               for s in family.samples if s.name.startswith(ROLE_FIGURES))


def one_of_each(metrics: Metrics, role: str, reasons: tuple[str, ...] = ("fenced",)) -> None:
    """Every role figure of `role` recorded: a tenure won, its lease written, a fence,
    a resignation, and a tenure lost for each of `reasons`."""
    for reason in reasons:
        metrics.leading(role, True)
        metrics.lease_written(role, 0.01)
        metrics.fenced(role)
        metrics.resigned(role)
        metrics.lost(role, reason)


def test_labelled_by_role_each_role_costs_24_series_and_up_to_32():
    roles = [f"role-{i}" for i in range(20)]
    m = Metrics()
    m.stand_for(roles, per_role_limit=len(roles))
    assert m.cardinality is Cardinality.PER_ROLE
    assert set(series_by_role(m).values()) == {1}  # stood for: the held gauge only
    for role in roles[:10]:
        one_of_each(m, role)
    for role in roles[10:]:
        one_of_each(m, role, REASONS)
    counts = series_by_role(m)
    assert {counts[role] for role in roles[:10]} == {24}
    assert {counts[role] for role in roles[10:]} == {32}


def test_low_cardinality_costs_one_series_a_role_at_10_000_roles():
    roles = [f"role-{i}" for i in range(10_000)]
    m = Metrics()
    m.stand_for(roles, per_role_limit=1000)
    assert m.cardinality is Cardinality.LOW
    for role in roles:
        one_of_each(m, role, REASONS)
    counts = series_by_role(m)
    assert len(counts) == len(roles)
    assert max(counts.values()) <= 3
    assert set(counts.values()) == {1}  # coordination_roles_held
    # The other role figures count every role together: 2 series for each counter
    # and reason, 15 for the histogram, for 10 000 roles as for one.
    assert role_figure_series(m) == 3 * 2 + len(REASONS) * 2 + 15
    one = Metrics()
    one.stand_for(["role-0"], per_role_limit=0)
    one_of_each(one, "role-0", REASONS)
    assert role_figure_series(one) == role_figure_series(m)


def test_low_cardinality_keeps_every_role_figure_summed_over_the_roles():
    m = Metrics()
    m.stand_for(["a", "b", "c"], per_role_limit=2)
    m.leading("a", True)
    m.lease_written("a", 0.004)
    m.leading("b", True)
    m.lease_written("b", 0.3)
    m.lease_written("b", 0.3)
    m.fenced("a")
    m.lost("a", "fenced")
    m.resigned("b")
    m.lost("b", "stopped")
    m.leading("c", True)
    assert [sample(m, "coordination_roles_held", role=r) for r in "abc"] == [0, 0, 1]
    assert sample(m, "coordination_elections_total") == 3
    assert sample(m, "coordination_fences_total") == 1
    assert sample(m, "coordination_resignations_total") == 1
    assert sample(m, "coordination_tenures_lost_total", reason="fenced") == 1
    assert sample(m, "coordination_tenures_lost_total", reason="stopped") == 1
    assert sample(m, "coordination_lease_write_seconds_bucket", le="0.005") == 1
    assert sample(m, "coordination_lease_write_seconds_bucket", le="0.5") == 3
    assert sample(m, "coordination_lease_write_seconds_count") == 3
    assert sample(m, "coordination_elections_total", role="a") is None


@pytest.mark.parametrize(("roles", "cardinality"), [
    (0, Cardinality.PER_ROLE), (999, Cardinality.PER_ROLE), (1000, Cardinality.PER_ROLE),
    (1001, Cardinality.LOW), (10_000, Cardinality.LOW)])
def test_the_role_figures_turn_low_cardinality_above_the_per_role_limit(roles, cardinality):
    assert Cardinality.for_roles(roles, 1000) is cardinality
    m = Metrics()
    m.stand_for([f"role-{i}" for i in range(roles)], per_role_limit=1000)
    assert m.cardinality is cardinality


def test_a_worker_stands_for_its_roles_once():
    m = Metrics()
    m.stand_for(["a"], per_role_limit=0)
    with pytest.raises(InvalidStateError, match="chosen once"):
        m.stand_for(["a", "b"], per_role_limit=0)
    assert m.cardinality is Cardinality.LOW


@pytest.mark.parametrize(("limit", "cardinality"), [(3, Cardinality.PER_ROLE),
                                                     (2, Cardinality.LOW)])
async def test_a_worker_chooses_the_cardinality_from_the_roles_it_stands_for(limit, cardinality):
    broker = MemoryBroker()
    broker.create_topic(STATE_TOPIC, 4)
    settings = Settings(partitions=4, member_id="a", app_id="test-cardinality",
                        metrics_per_role_limit=limit)

    async def idle(_leadership: Leadership) -> None:
        await asyncio.Event().wait()

    installation = install(create_app(settings, store="memory://"), settings,
                           transport_factory=lambda: MemoryTransport(broker))
    for name in ("x", "y", "z"):
        installation.role(name)(idle)
    service = installation.service
    service._assigned.set()  # the partition assignment a worker waits for first
    await service._connect_and_run()
    metrics = installation.context.metrics
    try:
        async def held() -> list[float | None]:
            return [sample(metrics, "coordination_roles_held", role=r) for r in "xyz"]

        await eventually(held, lambda values: values == [1, 1, 1], within=10)
        assert metrics.cardinality is cardinality
        per_role = cardinality is Cardinality.PER_ROLE
        assert set(series_by_role(metrics).values()) == ({18} if per_role else {1})
        assert (sample(metrics, "coordination_elections_total") is None) == per_role
    finally:
        await service.resign_all()

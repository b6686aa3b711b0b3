"""The worker's metrics: one Prometheus registry per worker, with the process
figures, the coordination figures as events happen, the fold lag read at each
scrape, and Faust's sensor figures recorded on the same registry."""

from __future__ import annotations

import asyncio

import pytest
from faust.types import TP
from prometheus_client.parser import text_string_to_metric_families

from agents.roles import MetricsObserver, RoleRunner
from app.factory import build
from app.metrics import FOLD_LAG, Metrics
from app.settings import Settings
from coordination import Leadership, LeadershipOptions, MemoryTransport
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
    m.standing(ROLE)
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

"""What one worker knows of its own health, read from Faust and the role runners.

`probe` asks the cluster for the state topic's last stable offsets (a live
ListOffsets, through Faust's consumer: under exactly_once it is a
read_committed consumer, and the worker's change FAUST-15 makes ``highwaters`` ask the
broker); `keep_probing` runs it as soon as the worker's tasks start and then
every probe interval, and `app.readiness.ClusterWatch` keeps the answer.
`snapshot` gathers the rest at the instant ``GET /ready`` is asked;
`app.readiness.assess` decides (`verdict`). `fold_lag` and `verdict` are also
the sources of the ``coordination_fold_lag_offsets`` and
``coordination_ready`` gauges (`app.metrics`). `liveness` answers ``GET
/health``: whether every role this worker leads renews within the health
tolerance.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from faust.types import TP

from app.context import Context
from app.readiness import Snapshot, Verdict, assess, fold_lag_of
from krabka.health import HealthReport, LeadershipHealth

__all__ = ["busy", "fold_lag", "keep_probing", "liveness", "probe", "snapshot", "verdict"]

log = logging.getLogger("app.health")


def busy(ctx: Context) -> str | None:
    """``"rebalancing"``, ``"recovering"`` (its tables) or None."""
    if ctx.app.rebalancing:
        return "rebalancing"
    if ctx.app.in_recovery:
        return "recovering"
    return None


async def probe(ctx: Context) -> None:
    """Ask the cluster for every state partition's last stable offset.

    Bounded by the cluster timeout, past which ``GET /ready`` reports the
    cluster silent anyway; `keep_probing` awaits each probe, so probes never
    pile up. Not by the probe interval: the consumer sends its ListOffsets on
    the connection its fetches use, and the broker answers a connection's
    requests in order, so on an idle state topic the answer waits behind a
    fetch's long poll (0.1 s with the worker's change FAUST-9, Faust's own
    1.5 s without). A bound of a 0.5 s interval failed every probe, and the
    worker never became ready.
    """
    topic = ctx.state_topic.get_topic_name()
    partitions = [TP(topic, p) for p in range(ctx.partitions)]
    ctx.cluster.note_busy(busy(ctx))
    try:
        ends = await asyncio.wait_for(ctx.app.consumer.highwaters(*partitions),
                                      ctx.settings.ready_cluster_timeout)
    except Exception as exc:
        if ctx.cluster.error is None:
            log.warning("the cluster did not answer the readiness probe: %r", exc)
        ctx.cluster.failed(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
        return
    ctx.cluster.answered({tp.partition: offset for tp, offset in ends.items()
                          if offset is not None}, await _positions(ctx))


async def _positions(ctx: Context) -> dict[int, int]:
    """The fold consumer's positions on the state partitions it folds (asked after the
    ends: a position at an end then means every record before it was read).

    A position the consumer cannot tell at once (a partition just assigned,
    whose offset it is still looking up) is left out: that partition's lag
    is then counted to its end until the next probe.
    """
    topic = ctx.state_topic.get_topic_name()
    consumer = ctx.app.consumer
    positions = {}
    for tp in ctx.app.assignor.assigned_actives():
        if tp.topic != topic:
            continue
        try:
            position = await asyncio.wait_for(consumer.position(tp),
                                              ctx.settings.ready_cluster_timeout)
        except Exception as exc:
            log.debug("no position of %s for the fold lag: %r", tp, exc)
            continue
        if position is not None:
            positions[tp.partition] = position
    return positions


async def keep_probing(ctx: Context) -> None:
    """Probe at once, then every ``ready_probe_interval`` (on the context's clock).

    Faust starts an app's tasks only once its tables have recovered, and a
    Faust timer waits one interval before its first run: a worker with
    nothing to recover answered 503 "the cluster has not answered a probe
    yet" for a whole interval plus a long poll after it was otherwise ready
    (2.9 s of its 8.3 s start-up at the default 2 s). Each probe is awaited
    before the next interval starts, so probes never pile up.
    """
    interval_ms = round(ctx.settings.ready_probe_interval * 1000)
    while True:
        await probe(ctx)
        await ctx.clock.sleep_until_monotonic(ctx.clock.monotonic_ms() + interval_ms)


def fold_lag(ctx: Context) -> dict[int, int]:
    """Per state partition this worker folds: `app.readiness.fold_lag_of` its last
    stable offset and consumer position at the last probe, and the fold's committed
    offset and records in flight now (Faust's: a record handed to the fold is
    unacknowledged until the fold is done with it, then acknowledged until the
    transaction that carries its offset commits)."""
    topic = ctx.state_topic.get_topic_name()
    consumer: Any = ctx.app.consumer  # the attributes are the base Consumer's, not ConsumerT's
    committed = consumer._committed_offset
    in_flight = {message.tp for message in list(consumer._unacked_messages)}
    in_flight.update(tp for tp, acked in list(consumer._acked.items()) if acked)
    lags = {}
    for tp in ctx.app.assignor.assigned_actives():
        if tp.topic != topic:
            continue
        end = ctx.cluster.end_offsets.get(tp.partition)
        if end is not None:
            lags[tp.partition] = fold_lag_of(end, committed.get(tp),
                                             ctx.cluster.positions.get(tp.partition),
                                             tp in in_flight)
    return lags


def snapshot(ctx: Context) -> Snapshot:
    """Everything `app.readiness.assess` needs, as of now."""
    ctx.cluster.note_busy(busy(ctx))
    held = {name: runner.leadership.renewal_overdue()
            for name, runner in ctx.runners.items()
            if runner.leading and runner.leadership is not None}
    return Snapshot(
        connected=ctx.transport is not None,
        silent_for=ctx.cluster.silent_for(),
        probe_error=ctx.cluster.error,
        fold_lag=fold_lag(ctx),
        renewals_failing=held,
        fence_margin=ctx.settings.leadership_options.fence_margin,
        busy=ctx.cluster.busy,
        busy_for=ctx.cluster.busy_for(),
    )


def verdict(ctx: Context) -> Verdict:
    """Whether this worker is ready now, and why not (``GET /ready``)."""
    return assess(snapshot(ctx), ctx.readiness)


def liveness(ctx: Context) -> HealthReport:
    """Whether every role this worker leads renews within
    `Settings.liveness_tolerance` of its due instant (``GET /health``)."""
    return LeadershipHealth(ctx.runners.values(),
                            tolerance=ctx.settings.liveness_tolerance).check()

"""What one worker knows of its own health, read from Faust and the role runners.

`probe` asks the cluster for the state topic's last stable offsets (a live
ListOffsets, through Faust's consumer: under exactly_once it is a
read_committed consumer, and the worker's change FAUST-15 makes ``highwaters`` ask the
broker); `keep_probing` runs it as soon as the worker's tasks start and then
every probe interval, and `app.readiness.ClusterWatch` keeps the answer.
`snapshot` gathers the rest at the instant ``GET /ready`` is asked;
`app.readiness.assess` decides. `fold_lag` is also the source of the
``coordination_fold_lag_offsets`` gauge (`app.metrics`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from faust.types import TP

from app.context import Context
from app.readiness import Snapshot

__all__ = ["busy", "fold_lag", "keep_probing", "probe", "snapshot"]

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
                          if offset is not None})


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
    """Per state partition this worker folds: last stable offset minus committed offset.

    The committed offset (Faust's, updated at each transaction commit and on
    assignment) is where a restarted fold would resume; none yet counts as 0.
    Transaction markers take offsets too, so an idle partition shows a lag of
    a few offsets, never 0.
    """
    topic = ctx.state_topic.get_topic_name()
    consumer: Any = ctx.app.consumer  # the attribute is the base Consumer's, not ConsumerT's
    committed = consumer._committed_offset
    lags = {}
    for tp in ctx.app.assignor.assigned_actives():
        if tp.topic != topic:
            continue
        end = ctx.cluster.end_offsets.get(tp.partition)
        if end is not None:
            lags[tp.partition] = max(0, end - (committed.get(tp) or 0))
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

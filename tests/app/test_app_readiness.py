"""The readiness rules of ``GET /ready``, with time driven by hand.

A worker is ready when its transport has connected, the cluster answered a
probe recently, its fold is close to the state topic's end, no role it holds
has been failing to renew for more than half the fence margin, and it has not
been rebalancing or recovering for too long. Every rule that fails gives its
reason; ``/ready`` answers 503 with them, and ``/health`` stays 200.
"""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from app import health
from app.factory import build
from app.readiness import ClusterWatch, ReadinessBounds, Snapshot, assess, fold_lag_of
from app.settings import Settings
from krabka import STATE_TOPIC, TransportError
from krabka.tenure import renewal_delay_ms
from krabka.testing import ManualClock, MemoryBroker, MemoryTransport
from tests.support.ports import free_port
from tests.support.sim import LEASE, RENEW, Cluster

BOUNDS = ReadinessBounds(cluster_timeout=10.0, max_fold_lag=100, max_busy=30.0)
HEALTHY = Snapshot(connected=True, silent_for=1.0, probe_error=None, fold_lag={0: 2, 3: 0},
                   renewals_failing={"billing": -3.0}, fence_margin=5.0, busy=None, busy_for=0.0)


def with_(**changes) -> Snapshot:
    return Snapshot(**{**HEALTHY.__dict__, **changes})


def test_a_worker_that_is_connected_caught_up_and_renewing_is_ready():
    verdict = assess(HEALTHY, BOUNDS)
    assert verdict.ready
    assert verdict.reasons == []
    assert verdict.json()["fold_lag"] == {"0": 2, "3": 0}


def test_each_rule_that_fails_is_named_in_the_reasons():
    cases = {
        "transport has not connected": with_(connected=False),
        "has not answered a probe yet: KafkaTimeoutError": with_(
            silent_for=None, probe_error="KafkaTimeoutError"),
        "has not answered for 10.5 s (bound 10 s)": with_(silent_for=10.5),
        "more than 100 offsets behind the state topic (partition 3: 101)": with_(
            fold_lag={0: 100, 3: 101}),
        "lease of role 'billing' has not been renewed for 2.6 s": with_(
            renewals_failing={"billing": 2.6}),
        "rebalancing for 30.5 s (bound 30 s)": with_(busy="rebalancing", busy_for=30.5),
        "recovering for 31.0 s": with_(busy="recovering", busy_for=31.0),
    }
    for reason, snapshot in cases.items():
        verdict = assess(snapshot, BOUNDS)
        assert not verdict.ready, reason
        assert len(verdict.reasons) == 1, verdict.reasons
        assert reason in verdict.reasons[0], verdict.reasons


def test_each_bound_itself_is_still_ready():
    at_bounds = with_(silent_for=10.0, fold_lag={0: 100}, renewals_failing={"billing": 2.5},
                      busy="rebalancing", busy_for=30.0)
    assert assess(at_bounds, BOUNDS).reasons == []


def test_every_failing_rule_is_listed_not_only_the_first():
    verdict = assess(with_(connected=False, silent_for=60.0, busy="recovering", busy_for=99.0),
                     BOUNDS)
    assert len(verdict.reasons) == 3


def test_impossible_bounds_are_refused():
    for bad in ({"cluster_timeout": 0}, {"max_fold_lag": -1}, {"max_busy": 0}):
        with pytest.raises(ValueError, match="must"):
            ReadinessBounds(**bad)


def test_the_watch_counts_silence_from_the_last_answer_and_busy_time_from_its_start():
    clock = ManualClock()
    watch = ClusterWatch(clock)
    assert watch.silent_for() is None
    watch.answered({0: 7})
    clock.advance(4.0)
    watch.failed("KafkaTimeoutError")
    assert watch.silent_for() == 4.0
    assert watch.error == "KafkaTimeoutError"
    assert watch.end_offsets == {0: 7}  # the last known end, until the next answer
    watch.answered({0: 9})
    assert watch.silent_for() == 0.0
    assert watch.error is None
    watch.note_busy("rebalancing")
    clock.advance(3.0)
    watch.note_busy("recovering")  # the rebalance goes on into a recovery: one busy spell
    clock.advance(2.0)
    assert (watch.busy, watch.busy_for()) == ("recovering", 5.0)
    watch.note_busy(None)
    assert (watch.busy, watch.busy_for()) == (None, 0.0)


def test_commit_markers_past_the_last_record_are_no_fold_lag():
    """A transactional partition ends with a commit marker: the fold commits the
    offset after its last record, one short of the end, and never more."""
    # Records at 0..9, each its own transaction: markers at 1, 3, .., 19; end 20.
    assert fold_lag_of(20, 19, position=20, in_flight=False) == 0
    # A partition of markers only (aborted writes), nothing ever committed.
    assert fold_lag_of(6, None, position=6, in_flight=False) == 0


def test_the_fold_lag_counts_to_the_end_while_the_fold_is_not_current():
    # The consumer has not read to the end: every offset left, markers included.
    assert fold_lag_of(20, 11, position=14, in_flight=False) == 9
    # It has, but a record it read is still being folded or waits for its commit.
    assert fold_lag_of(20, 11, position=20, in_flight=True) == 9
    # Its position is not known (just assigned): counted to the end.
    assert fold_lag_of(20, 19, position=None, in_flight=False) == 1
    assert fold_lag_of(20, None, position=None, in_flight=False) == 20


def test_the_watch_keeps_the_positions_asked_with_the_last_answer():
    watch = ClusterWatch(ManualClock())
    watch.answered({0: 7, 1: 9}, {0: 7})
    assert (watch.end_offsets, watch.positions) == ({0: 7, 1: 9}, {0: 7})
    watch.answered({0: 8})
    assert watch.positions == {}


class BreakableTransport(MemoryTransport):
    """A client whose lease writes fail once `broken` (a broker gone, for the leader)."""

    broken = False

    async def begin_transaction(self, role, token):
        if self.broken:
            raise TransportError("the broker is gone")
        return await super().begin_transaction(role, token)


async def test_a_held_role_whose_renewals_fail_turns_unready_after_half_the_margin():
    cluster = Cluster()
    transport = BreakableTransport(cluster.broker)
    task = cluster.candidate("a", transport=transport)
    await cluster.until(task.done, within=1)
    leadership = task.result()
    margin = leadership.options.fence_margin  # 1 s for a 3 s lease
    renewals: list[int] = []
    leadership.on_renewed = lambda _lease, _latency: renewals.append(
        cluster.clock.monotonic_ms())
    await cluster.until(lambda: len(renewals) == 3, within=RENEW * 4)  # never late
    assert leadership.renewal_overdue() <= 0.0
    transport.broken = True  # right after a renewal
    # The next renewal is due at its jittered instant, not a whole interval on.
    due = renewals[-1] + renewal_delay_ms("billing", "a", 3, round(RENEW * 1000))
    assert due < renewals[-1] + RENEW * 1000
    await cluster.advance((due - cluster.clock.monotonic_ms()) / 1000 + margin / 2 - 0.01)
    late = leadership.renewal_overdue()
    assert late == pytest.approx(margin / 2 - 0.01)
    assert assess(with_(renewals_failing={"billing": late}, fence_margin=margin), BOUNDS).ready
    await cluster.advance(0.02)
    late = leadership.renewal_overdue()
    assert late > margin / 2
    assert not leadership.fenced()
    verdict = assess(with_(renewals_failing={"billing": late}, fence_margin=margin), BOUNDS)
    assert not verdict.ready
    assert "'billing' has not been renewed" in verdict.reasons[0]
    assert LEASE - margin - RENEW > margin / 2  # the rule fires before the fence deadline
    await leadership.resign()


async def test_ready_answers_503_with_the_reasons_until_the_cluster_answered_and_health_200():
    clock = ManualClock()
    broker = MemoryBroker(clock=clock)
    broker.create_topic(STATE_TOPIC, 4)
    port = free_port()
    settings = Settings(partitions=4, web_port=port, web_host="127.0.0.1", member_id="a",
                        app_id="test-ready")
    ctx = build(settings, store="memory://", roles={}, clock=clock,
                transport_factory=lambda: MemoryTransport(broker))
    server = TestServer(ctx.app.web.web_app, host="127.0.0.1", port=port)
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as session:
            async def get(path):
                async with session.get(f"http://127.0.0.1:{port}{path}") as response:
                    return response.status, await response.json()

            status, body = await get("/ready")
            assert status == 503
            assert body["ready"] is False
            assert body["member"] == "a"
            assert len(body["reasons"]) == 2  # no transport, no answer from the cluster
            assert (await get("/health"))[0] == 200
            ctx.transport = MemoryTransport(broker)
            ctx.cluster.answered({p: 0 for p in range(4)})
            status, body = await get("/ready")
            assert (status, body["reasons"]) == (200, [])
            clock.advance(settings.ready_cluster_timeout + 0.1)
            status, body = await get("/ready")
            assert status == 503
            assert "has not answered for" in body["reasons"][0]
    finally:
        await server.close()


async def test_a_probe_answered_after_the_probe_interval_but_within_the_timeout_counts():
    """The consumer's ListOffsets waits behind its fetch's long poll on the same
    connection (on an idle topic, as long as the poll): an answer slower than the probe
    interval is still an answer."""
    settings = Settings(partitions=4, member_id="a", app_id="test-probe",
                        ready_probe_interval=0.05, ready_cluster_timeout=5.0)
    ctx = build(settings, store="memory://", roles={}, clock=ManualClock(),
                transport_factory=lambda: MemoryTransport(MemoryBroker()))

    class SlowConsumer:
        async def highwaters(self, *partitions):
            await asyncio.sleep(4 * settings.ready_probe_interval)  # the answer's latency
            return {tp: 7 for tp in partitions}

    ctx.app.consumer = SlowConsumer()
    await health.probe(ctx)
    assert ctx.cluster.error is None
    assert ctx.cluster.end_offsets == {p: 7 for p in range(4)}


async def test_the_worker_probes_the_cluster_as_soon_as_its_tasks_start_then_every_interval():
    """Faust starts an app's tasks once its tables have recovered; the first probe
    must not wait an interval after that, or a worker otherwise ready answers 503."""
    clock = ManualClock()
    settings = Settings(partitions=4, member_id="a", app_id="test-first-probe",
                        ready_probe_interval=30.0, ready_cluster_timeout=60.0)
    ctx = build(settings, store="memory://", roles={}, clock=clock,
                transport_factory=lambda: MemoryTransport(MemoryBroker(clock=clock)))
    asked: list[int] = []
    answered = asyncio.Event()

    class Consumer:
        async def highwaters(self, *partitions):
            asked.append(clock.monotonic_ms())
            answered.set()
            return {tp: len(asked) for tp in partitions}

    ctx.app.consumer = Consumer()
    # What Faust runs for each of the app's tasks once recovery has completed.
    start = next(task for task in ctx.app._app_tasks if task.__name__ == "probe_cluster")
    probing = asyncio.create_task(start())
    try:
        await asyncio.wait_for(answered.wait(), 5)
        assert ctx.cluster.silent_for() == 0
        answered.clear()
        clock.advance(settings.ready_probe_interval)
        await asyncio.wait_for(answered.wait(), 5)
        # The clock moved only when the test moved it: the second probe came
        # one interval after the first, and none in between.
        assert asked == [0, 30_000]
        assert ctx.cluster.end_offsets == {p: 2 for p in range(4)}
    finally:
        probing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await probing


def test_the_bounds_are_settings_and_a_probe_interval_above_the_timeout_is_refused():
    settings = Settings.from_env({"COORDINATION_READY_CLUSTER_TIMEOUT": "4",
                                  "COORDINATION_READY_PROBE_INTERVAL": "1",
                                  "COORDINATION_READY_MAX_FOLD_LAG": "50",
                                  "COORDINATION_READY_MAX_BUSY": "20"})
    assert (settings.ready_cluster_timeout, settings.ready_probe_interval,
            settings.ready_max_fold_lag, settings.ready_max_busy) == (4.0, 1.0, 50, 20.0)
    with pytest.raises(ValueError, match="COORDINATION_READY_PROBE_INTERVAL"):
        Settings.from_env({"COORDINATION_READY_CLUSTER_TIMEOUT": "2",
                           "COORDINATION_READY_PROBE_INTERVAL": "2"})

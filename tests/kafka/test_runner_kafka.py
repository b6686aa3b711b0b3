"""The worker's runner on the real broker: an observer's bug leaves the role
with an owner.

The worker's metrics observer is the first user code a tenure meets: it is
told `elected` before the role's function starts. A bug in it (a label that is
missing) is logged and changes nothing: the function runs, and when the worker
stops, the role is handed back and a standby leads at once, as it would behind
a worker without the bug.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from agents.roles import MetricsObserver, RoleRunner
from krabka import (
    Leadership,
    LeadershipOptions,
    describe_leadership,
    describe_role_state,
)
from krabka.kafka import KafkaTransport
from tests.support.kafka_io import create_state_and_output_topics
from tests.support.polling import eventually

pytestmark = pytest.mark.integration

OPTIONS = LeadershipOptions(partitions=4, lease_duration=3.0, renew_interval=1.0,
                            challenge_stagger=0.5)
STARTUP = 60.0  # the first producer of a fresh role on a busy machine


class BrokenMetrics:
    """Worker metrics whose `leading` gauge has a bug: it raises on every call."""

    def leading(self, role: str, leading: bool) -> None:
        raise KeyError("role_leading: a label that is missing")

    def fenced(self, role: str) -> None: ...
    def resigned(self, role: str) -> None: ...
    def lost(self, role: str, reason: str) -> None: ...
    def lease_written(self, role: str, seconds: float) -> None: ...


async def test_a_standby_leads_within_a_lease_of_the_stop_of_a_leader_whose_observer_raises(
        kafka_bootstrap):
    state, _ = await create_state_and_output_topics(kafka_bootstrap, OPTIONS.partitions)
    role = f"test.observer-{uuid.uuid4().hex[:8]}"
    running: dict[str, bool] = {"a": False, "b": False}

    def function(member: str):
        async def work(_leadership: Leadership) -> None:
            running[member] = True
            try:
                await asyncio.Event().wait()
            finally:
                running[member] = False
        return work

    transports = {m: KafkaTransport(kafka_bootstrap, topic=state) for m in ("a", "b")}
    a = RoleRunner(transports["a"], role, function("a"), "a", OPTIONS,
                   observer=MetricsObserver(BrokenMetrics()))
    b = RoleRunner(transports["b"], role, function("b"), "b", OPTIONS)
    try:
        a.start()

        async def a_runs() -> bool:
            return running["a"] and a.leading

        await eventually(a_runs, bool, within=STARTUP)
        b.start()
        await eventually(lambda: describe_role_state(transports["b"], role, OPTIONS.partitions),
                         lambda state: state.roster == ["a", "b"], within=STARTUP)
        await a.stop()
        stopped = time.monotonic()

        async def b_runs() -> bool:
            return running["b"]

        await eventually(b_runs, bool, within=OPTIONS.lease_duration + 5)
        took = time.monotonic() - stopped
        assert took < OPTIONS.lease_duration, f"b led {took:.2f} s after a stopped"
        status = await describe_leadership(transports["b"], role)
        assert b.leadership is not None
        assert status.authoritative(b.leadership.token)
    finally:
        for runner in (a, b):
            await runner.stop()
        for transport in transports.values():
            await transport.close()

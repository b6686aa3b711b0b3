"""``GET /health`` is the worker's liveness: 503 while a role it leads is overdue
for its renewal past the health tolerance, 200 otherwise.

The web server is the worker's own (its aiohttp application, on a free port);
the runner is one the role service would start, on an in-process broker whose
lease writes the test holds back, with time driven by hand.
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from app.factory import build
from app.settings import Settings
from krabka.runner import LeaderRunner, RunnerObserver
from krabka.tenure import Leadership, renewal_delay_ms
from tests.support.hanging import HangingRenewals
from tests.support.ports import free_port
from tests.support.sim import LEASE, RENEW, STAGGER, Cluster

ROLE = "billing"
TOLERANCE = 0.5


class Renewals(RunnerObserver):
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.at: list[int] = []

    def renewed(self, role: str, leadership: Leadership, latency: float) -> None:
        self.at.append(self.cluster.clock.monotonic_ms())


async def idle(_leadership: Leadership) -> None:
    await asyncio.Event().wait()


@pytest.mark.parametrize("fencing", ["epoch", "term"])
async def test_health_is_503_while_a_led_roles_renewal_is_overdue_past_the_tolerance(fencing):
    cluster = Cluster()
    port = free_port()
    settings = Settings(partitions=cluster.partitions, web_port=port, web_host="127.0.0.1",
                        member_id="a", app_id="test-liveness", lease_duration=LEASE,
                        renew_interval=RENEW, challenge_stagger=STAGGER, fencing=fencing,
                        health_tolerance=TOLERANCE)
    ctx = build(settings, store="memory://", roles={}, clock=cluster.clock,
                transport_factory=cluster.transport)
    transport = HangingRenewals(cluster.broker)
    renewals = Renewals(cluster)
    runner = LeaderRunner(transport, ROLE, ctx.member, idle,
                          options=settings.leadership_options, clock=cluster.clock,
                          observer=renewals, stop_timeout=1.0)
    ctx.runners[ROLE] = runner  # as the role service does once it has connected
    server = TestServer(ctx.app.web.web_app, host="127.0.0.1", port=port)
    await server.start_server()
    runner.start()
    try:
        async with aiohttp.ClientSession() as session:
            async def health():
                async with session.get(f"http://127.0.0.1:{port}/health") as response:
                    return response.status, await response.json()

            await cluster.until(lambda: len(renewals.at) == 2, within=LEASE * 2)
            status, body = await health()
            assert (status, body["healthy"], body["reasons"]) == (200, True, [])
            assert body["roles"][ROLE]["leading"] is True
            transport.block()
            due = renewals.at[-1] + renewal_delay_ms(ROLE, "a", 2, settings.leadership_options
                                                     .renew_ms)
            await cluster.advance((due - cluster.clock.monotonic_ms()) / 1000 + TOLERANCE
                                  - 0.01)
            assert (await health())[0] == 200
            await cluster.advance(0.02)
            status, body = await health()
            assert status == 503
            assert body["healthy"] is False
            assert body["health_tolerance"] == TOLERANCE
            assert body["reasons"] == ["role 'billing' is led by 'a' but its renewal is 0.5 s "
                                       "overdue (tolerance 0.5 s)"]
            assert body["roles"][ROLE]["leading"] is True  # before its fence deadline
            transport.resume()
            await cluster.settle()
            status, body = await health()
            assert (status, body["healthy"]) == (200, True)
            assert body["roles"][ROLE]["tenures"] == 1
    finally:
        transport.resume()
        await cluster.stop_runners(runner)
        await server.close()


def test_the_health_tolerance_is_a_setting_that_defaults_to_the_lease_duration():
    assert Settings(lease_duration=12.0, renew_interval=4.0).liveness_tolerance == 12.0
    settings = Settings.from_env({"COORDINATION_HEALTH_TOLERANCE": "2.5"})
    assert (settings.health_tolerance, settings.liveness_tolerance) == (2.5, 2.5)
    for bad in ("0", "-1", "nan", "inf"):
        with pytest.raises(ValueError, match="COORDINATION_HEALTH_TOLERANCE"):
            Settings.from_env({"COORDINATION_HEALTH_TOLERANCE": bad})


"""A worker cut off from the broker stops the demo role's function by the fence deadline.

This test stops a broker, so it starts its own (the session broker is shared
by every other integration test) and stops it by PID at the end.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.app.test_app_harness import AppGroup, poll
from tests.support.ports import kafka_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
KAFKA = [sys.executable, str(ROOT / "deploy" / "kafka" / "kafka.py")]
LEASE = 6.0
MARGIN_MS = 2000  # min(5 s, lease / 3)
STOP_BOUND = 45  # resign attempts (bounded) + the stop watchdog (app.faust_app)


def _kafka(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KAFKA, *args], capture_output=True, text=True, timeout=timeout,
                          check=False)


@pytest.fixture
def own_broker(tmp_path):
    folder = tmp_path / "kafka"
    try:
        started = _kafka("up", "--dir", str(folder), "--port", str(kafka_port()))
        assert started.returncode == 0, started.stdout + started.stderr
        yield folder, started.stdout.strip().splitlines()[-1]
    finally:
        _kafka("down", "--dir", str(folder), timeout=120)


def test_a_worker_cut_off_from_the_broker_stops_the_role_by_the_fence_deadline(own_broker,
                                                                              tmp_path):
    folder, bootstrap = own_broker
    group = AppGroup(bootstrap, tmp_path, partitions=2, lease=LEASE, renew=1.5, stagger=0.5)
    group.create_topics()
    worker = group.start()
    try:
        def leading() -> dict | None:
            health = worker.health()
            demo = (health or {}).get("roles", {}).get("demo", {})
            return demo if demo.get("running") and demo.get("fence_deadline") else None

        poll(leading, 120, "the worker leading the demo role")
        cut_at = time.time_ns() // 1_000_000
        stopped = _kafka("down", "--dir", str(folder), timeout=120)
        assert stopped.returncode == 0, stopped.stderr

        def function_stopped() -> dict | None:
            demo = (worker.health() or {}).get("roles", {}).get("demo", {})
            return demo if demo.get("last_stop") and not demo.get("running") else None

        demo = poll(function_stopped, LEASE * 4, "the demo function stopped")
        stop = demo["last_stop"]
        assert stop["reason"] == "fenced"
        # Stopped by the fence deadline (within scheduling delay), before the lease
        # ran out: at the deadline when renewals just failed, earlier when the
        # role's producer failed fatally as the broker shut down (the epoch can
        # no longer write: EpochLostError ends the tenure at once).
        assert cut_at <= stop["at"] < stop["fence_deadline"] + 1000
        assert stop["at"] < stop["fence_deadline"] + MARGIN_MS
        if "fence deadline" in stop["error"]:
            assert stop["at"] >= stop["fence_deadline"]
        else:
            assert "producer" in stop["error"], stop["error"]
        assert demo["leading"] is False
        # Shutdown with the broker gone is still bounded (the role service gives up
        # resigning after its timeout; Faust's consumer may need its own).
        took = worker.stop(timeout=90)
        assert took < STOP_BOUND, worker.log_tail()
        print(f"\nfunction stopped {stop['at'] - stop['fence_deadline']} ms after the fence "
              f"deadline; shutdown without a broker took {took:.1f} s")
    finally:
        group.stop_all()

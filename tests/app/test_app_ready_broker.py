"""``GET /ready`` follows the cluster: a worker whose only broker stops turns
unready within a bound, naming the cause, and ready again once the broker is
back; ``GET /health`` answers 200 throughout (the process is alive).

The broker is the test's own (deploy/kafka/kafka.py on free ports, stopped by
``kafka.py down`` at the end), as in tests/faults/test_faults_broker.py.
"""

from __future__ import annotations

import time

import pytest

from tests.app.test_app_harness import AppGroup, poll
from tests.faults.test_faults_broker import own_broker

pytestmark = pytest.mark.integration

START = 120  # a worker's start-up, group join and table recovery
CLUSTER_TIMEOUT = 3.0
PROBE_INTERVAL = 1.0
# The probe that first goes unanswered, the timeout, and the next request's
# probe: the bound plus a second on each side for a busy machine.
UNREADY_WITHIN = CLUSTER_TIMEOUT + 2 * PROBE_INTERVAL + 2.0
BACK_WITHIN = 120  # the broker's restart and the clients' reconnection


def test_ready_turns_503_with_a_reason_when_the_broker_stops_and_200_when_it_returns(tmp_path):
    with own_broker(tmp_path / "kafka") as broker:
        group = AppGroup(broker.bootstrap, tmp_path, partitions=2, extra_env={
            "COORDINATION_READY_CLUSTER_TIMEOUT": str(CLUSTER_TIMEOUT),
            "COORDINATION_READY_PROBE_INTERVAL": str(PROBE_INTERVAL),
        })
        group.create_topics()
        worker = group.start()
        try:
            def ready(want: int):
                def check():
                    status, body = worker.get("/ready")
                    return body if status == want else None
                return check

            body = poll(ready(200), START, "the worker ready")
            assert body["ready"] is True
            assert body["connected"] is True
            assert set(body["fold_lag"]) == {"0", "1"}  # it folds both partitions

            broker.kill("KILL")
            stopped = time.monotonic()
            # The demo role's renewals may fail first (half its fence margin is
            # under a second); the cluster's silence must be named within the bound.
            poll(ready(503), UNREADY_WITHIN + 5, "the worker unready", interval=0.1)
            first_503 = time.monotonic() - stopped

            def silent():
                body = ready(503)()
                return body if body and any("the cluster has not answered" in r
                                            for r in body["reasons"]) else None

            body = poll(silent, UNREADY_WITHIN + 5, "the cluster's silence named", interval=0.1)
            unready_after = time.monotonic() - stopped
            assert unready_after <= UNREADY_WITHIN, body
            assert worker.health() is not None  # alive: /health stays 200

            broker.start()
            started = time.monotonic()
            poll(ready(200), BACK_WITHIN, "the worker ready again")
            print(f"\n/ready: 503 {first_503:.1f} s after the broker stopped, the cluster named "
                  f"after {unready_after:.1f} s (bound {UNREADY_WITHIN:g} s): {body['reasons']}; "
                  f"200 {time.monotonic() - started:.1f} s after it was back")
            assert worker.alive(), worker.log_tail()
        finally:
            group.stop_all()

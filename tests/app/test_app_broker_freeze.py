"""A worker whose only broker freezes while it folds (SIGSTOP: connections stay
open, nothing answers) turns unready naming the cluster's silence, and once the
broker answers again (SIGCONT) folds every record to the end, without a restart,
as long as the freeze is shorter than the transaction timeout (a longer one
aborts the open transactions, and the worker's next commit fails as a fenced
one does: docs/decisions/0111-a-stalled-flush-puts-the-commit-off.md).

The broker is the test's own (deploy/kafka/kafka.py on free ports, stopped by
``kafka.py down`` at the end), as in tests/faults/test_faults_broker.py. Every
wait polls a condition with a deadline; the worker is stopped by PID.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.app.test_app_harness import AppGroup, poll, register_roles
from tests.faults.test_faults_broker import own_broker

pytestmark = pytest.mark.integration

PARTITIONS = 2
ROLES = 20_000
"""Registrations on the state topic before the worker starts: several seconds of
folding on this machine kind."""
START = 180.0
"""Seconds for the worker's start-up and group join."""
CLUSTER_TIMEOUT = 3.0
PROBE_INTERVAL = 0.5
FROZEN = 10.0
"""Seconds of the cluster's silence, as the worker reports it, before the broker
thaws: longer than a commit's flush waits without a write sent and than the
group's session, shorter than the transaction timeout (60 s)."""
SILENT_WITHIN = 60.0 + FROZEN
"""Seconds for the worker to report the frozen cluster's silence."""
CAUGHT_UP_WITHIN = 240.0
"""Seconds, after the broker answers again, to fold every registration."""


def test_a_worker_whose_broker_freezes_while_it_folds_folds_to_the_end_once_it_thaws(tmp_path):
    with own_broker(tmp_path / "kafka") as broker:
        group = AppGroup(broker.bootstrap, tmp_path, partitions=PARTITIONS, extra_env={
            "COORDINATION_READY_CLUSTER_TIMEOUT": str(CLUSTER_TIMEOUT),
            "COORDINATION_READY_PROBE_INTERVAL": str(PROBE_INTERVAL),
        })
        group.create_topics()
        asyncio.run(register_roles(broker.bootstrap, group.state_topic,
                                   [f"acme.freeze-{i:05d}" for i in range(ROLES)], PARTITIONS))
        worker = group.start()
        try:
            def ready() -> tuple[int, dict]:
                status, body = worker.get("/ready")
                return status, body if isinstance(body, dict) else {}

            def folding() -> dict[str, int] | None:
                lags = ready()[1].get("fold_lag") or {}
                total = sum(lags.values())
                return lags if len(lags) == PARTITIONS and 0 < total < ROLES else None

            poll(folding, START, "the worker folding the registrations", interval=0.1)
            broker.kill("STOP")
            try:
                def silent() -> list[str] | None:
                    body = ready()[1]
                    reasons = body.get("reasons", [])
                    return reasons if (any("has not answered" in r for r in reasons)
                                       and body.get("cluster_silent_for", 0) >= FROZEN) else None

                poll(silent, SILENT_WITHIN, "the frozen cluster's silence named")
                assert worker.alive(), worker.log_tail()
            finally:
                broker.kill("CONT")

            def caught_up() -> dict[str, int] | None:
                status, body = ready()
                lags = body.get("fold_lag") or {}
                return lags if (status == 200 and len(lags) == PARTITIONS
                                and not any(lags.values())) else None

            poll(caught_up, CAUGHT_UP_WITHIN, "the worker ready with every registration folded")
            assert worker.alive(), worker.log_tail()
            status, body = worker.get("/roles/")
            assert status == 200
            assert sum(row["role"].startswith("acme.freeze-") for row in body["roles"]) == ROLES
        finally:
            group.stop_all()

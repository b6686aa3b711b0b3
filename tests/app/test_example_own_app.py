"""The example of a user's own Faust app (examples/own_app/) on the real broker.

``faust -A examples.own_app.myapp worker`` runs as a process: its role is
elected (the coordination's web view says so), its own agent processes an
order (its own web page shows the total) and ``/ready`` answers 200; SIGTERM
stops it with status 0.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tests.app.test_app_harness import AppGroup, AppWorker, poll

pytestmark = pytest.mark.integration

APP_MODULE = "examples.own_app.myapp"
ROLE = "own-app.reporter"
START = 120  # start-up, group join and table recovery


def _held_by(worker: AppWorker) -> dict[str, Any] | None:
    status, body = worker.get(f"/roles/{ROLE}/")
    if status == 200 and body["status"] == "held" and body["holder"] == worker.member:
        return body
    return None


def _totals(worker: AppWorker) -> dict[str, int] | None:
    status, body = worker.get("/orders/")
    return body if status == 200 and body else None


async def _create_topic(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 4, 1)])
    finally:
        await admin.close()


async def _send_order(bootstrap: str, topic: str, customer: str, amount: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(topic, str(amount).encode(), key=customer.encode())
    finally:
        await producer.stop()


def test_the_example_app_elects_its_role_runs_its_agent_and_stops_cleanly(
        kafka_bootstrap: str, tmp_path):
    orders = f"own-app-orders-it-{uuid.uuid4().hex[:8]}"
    group = AppGroup(kafka_bootstrap, tmp_path,
                     extra_env={"OWN_APP_ORDERS_TOPIC": orders, "COORDINATION_DEMO": "0"})
    group.create_topics()
    asyncio.run(_create_topic(kafka_bootstrap, orders))  # an input topic, as the README says
    worker = group.start(app_module=APP_MODULE)
    try:
        held = poll(lambda: _held_by(worker), START, f"{ROLE} held by the example's worker")
        assert held["token"] is not None
        asyncio.run(_send_order(kafka_bootstrap, orders, "alice", 3))
        assert poll(lambda: _totals(worker), START, "the order counted") == {"alice": 3}
        poll(lambda: worker.get("/ready")[0] == 200, START, "the example's worker ready")
        assert worker.alive(), worker.log_tail()
    finally:
        worker.stop()
    assert worker.process.returncode == 0, worker.log_tail()
    assert "Traceback" not in worker.log.read_text(errors="replace")

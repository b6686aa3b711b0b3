"""A Faust app of its own that hosts the coordination: ``faust -A examples.own_app.myapp worker``.

The app is this project's user's: its own id, its own topic, table, agent
and web page. `app.install.install` adds the coordination to it (the state
table, the fold, the web views ``/roles/``, ``/health``, ``/ready``,
``/metrics``, the role service), and the app declares one role on the
installation. See README.md beside this file.

- The agent ``count-orders`` adds each order (key: the customer, value: a
  JSON amount) to the ``order-totals`` table; ``GET /orders/`` shows
  the totals of the partitions this worker holds.
- The role ``own-app.reporter`` runs on one worker of the group at a time and
  logs the totals it sees while it leads.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from app.faust_config import broker_credentials, processing_guarantee
from app.install import CoordinationApp, install
from app.settings import Settings
from krabka import Leadership

log = logging.getLogger("own_app")

ORDERS_TOPIC = os.environ.get("OWN_APP_ORDERS_TOPIC", "own-app-orders")
REPORT_INTERVAL = float(os.environ.get("OWN_APP_REPORT_INTERVAL", "5"))

# The coordination's settings: the cluster, the state topic, the leases
# (KAFKA_BOOTSTRAP_SERVERS and the other KAFKA_* connection variables,
# COORDINATION_*; docs/app.md#settings).
settings = Settings.from_env()

app = CoordinationApp(
    # What install() requires: the settings' app id and cluster, and the
    # guarantee of the fencing mode (exactly_once; at_least_once in term mode).
    settings.app_id,
    broker=f"kafka://{settings.bootstrap_servers}",
    # TLS and SASL as the settings' connection says (none on a plaintext cluster).
    broker_credentials=broker_credentials(settings.connection),
    processing_guarantee=processing_guarantee(settings),
    # The rest is the app's own choice; this one serves its web pages where
    # the coordination's settings say (one port per local worker).
    web_port=settings.web_port,
    web_host=settings.web_host,
    web_bind=settings.web_bind,
    datadir=str(settings.datadir),
    topic_partitions=4,
)

# Key: the customer (UTF-8); value: the amount (JSON). An input topic, created
# before the app starts (README.md): Faust subscribes to the topics that exist
# when its consumer starts, and one it creates itself may come too late.
orders = app.topic(ORDERS_TOPIC, key_type=str, value_serializer="json")
totals = app.Table("order-totals", key_type=str, value_type=int, default=int)


@app.agent(orders, name="count-orders")
async def count_orders(stream: Any) -> None:
    async for customer, amount in stream.items():
        totals[customer] += int(amount)


@app.page("/orders/")
async def order_totals(web: Any, request: Any) -> Any:
    return web.json(dict(totals.items()))


coordination = install(app, settings)


@coordination.role("own-app.reporter")
async def report(leadership: Leadership) -> None:
    """Log the totals while leading. A side effect that must not outlive the
    tenure belongs in ``leadership.transaction()`` (see app/demo.py)."""
    while True:
        log.info("reporter (tenure %d): totals %s", leadership.tenure, dict(totals.items()))
        await asyncio.sleep(REPORT_INTERVAL)

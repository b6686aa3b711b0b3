"""The demo role: the leader writes numbered, fenced records to an output topic.

Each record is JSON ``{"member", "producer_id", "producer_epoch", "tenure",
"seq", "t_ms"}`` on ``coordination-demo-output`` (partition 0), written in a
guarded transaction: a deposed leader's records never become visible to a
read_committed reader, so that reader sees tenures only grow. `app.main`
declares it as role `DEMO_ROLE` when ``COORDINATION_DEMO=1``.
"""

from __future__ import annotations

import asyncio
import os
import time

import orjson

from krabka import Leadership, TermToken

__all__ = ["DEMO_ROLE", "DEMO_TOPIC", "demo"]

DEMO_ROLE = "demo"
DEMO_TOPIC = os.environ.get("COORDINATION_DEMO_TOPIC", "coordination-demo-output")
INTERVAL = float(os.environ.get("COORDINATION_DEMO_INTERVAL", "0.5"))


async def demo(leadership: Leadership) -> None:
    """Write one fenced record per interval while leading."""
    token = leadership.token
    stamp: dict[str, int] = (
        {"term": token.term} if isinstance(token, TermToken)
        else {"producer_id": token.producer_id, "producer_epoch": token.producer_epoch})
    sequence = 0
    while True:
        sequence += 1
        record = {"member": leadership.member, **stamp, "tenure": leadership.tenure,
                  "seq": sequence, "t_ms": time.time_ns() // 1_000_000}
        async with leadership.transaction() as txn:
            await txn.send(DEMO_TOPIC, orjson.dumps(record), key=b"demo", partition=0)
        await asyncio.sleep(INTERVAL)

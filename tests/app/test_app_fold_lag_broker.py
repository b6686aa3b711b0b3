"""The fold lag of ``GET /ready`` reaches 0 once the fold is current on a state
topic written in transactions, as a cluster writes it: every lease write is
its own transaction, so each partition ends with a commit marker the fold
never commits past.
"""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaProducer

from krabka.format.partition import role_partition
from krabka.format.records import (
    Lease,
    Registration,
    encode_key,
    encode_lease,
    encode_registration,
    lease_key,
    registration_key,
)
from tests.app.test_app_harness import AppGroup, poll

pytestmark = pytest.mark.integration

PARTITIONS = 2
START = 120  # a worker's start-up, group join and table recovery
CAUGHT_UP = 60  # 60 transactional records folded and committed, and a probe after


async def _write_in_transactions(group: AppGroup, roles: int, renewals: int) -> None:
    """Each role's registration and renewals, every record its own transaction."""
    producer = AIOKafkaProducer(bootstrap_servers=group.bootstrap, acks="all",
                                transactional_id=f"{group.app_id}-writer")
    await producer.start()
    try:
        member = "writer.example:6066"
        for i in range(renewals + 1):
            for r in range(roles):
                role = f"lag.role-{r}"
                partition = role_partition(role, PARTITIONS)
                key, value = ((encode_key(registration_key(role, member)),
                               encode_registration(Registration(member, 1_000)))
                              if i == 0 else
                              (encode_key(lease_key(role)),
                               encode_lease(Lease(member, 9_000 + r, 0, i, i + 600_000))))
                async with producer.transaction():
                    await producer.send(group.state_topic, value, key=key,
                                        partition=partition)
    finally:
        await producer.stop()


def test_the_fold_lag_is_zero_once_the_fold_has_caught_up_with_a_transactional_topic(
    kafka_bootstrap, tmp_path,
):
    group = AppGroup(kafka_bootstrap, tmp_path, partitions=PARTITIONS,
                     extra_env={"COORDINATION_DEMO": "0",
                                "COORDINATION_READY_PROBE_INTERVAL": "0.5"})
    group.create_topics()
    worker = group.start()
    try:
        def ready():
            status, body = worker.get("/ready")
            return body if status == 200 else None

        poll(ready, START, "the worker ready")
        asyncio.run(_write_in_transactions(group, roles=6, renewals=9))

        last = {}

        def current():
            nonlocal last
            _, body = worker.get("/ready")
            last = (body or {}).get("fold_lag")
            return last if last and set(last) == {"0", "1"} and not any(last.values()) \
                else None

        try:
            poll(current, CAUGHT_UP, "a fold lag of 0 on every partition", interval=0.2)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the last fold lag: {last}") from None
        roles = worker.get("/roles/")[1]["roles"]
        assert {row["role"] for row in roles} >= {f"lag.role-{r}" for r in range(6)}
    finally:
        group.stop_all()

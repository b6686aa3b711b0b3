"""A worker with an empty data directory rebuilds its tables from the changelog
before it says it is ready, on the real broker.

The changelog is written here, in one transaction, as a worker's exactly-once
commits leave it (a commit marker at the end of each partition), with several
versions of each role's value: 40 000 records, so the recovery's first fetch
takes the consumer thread most of a second to decode. That is the window in
which Faust's recovery, asking the consumer's position while the fetched
records were still on their way to the changelog queue, marked partitions
recovered with none of their records applied (FAUST-6, `app.faust_changes`).
Every wait polls a condition with a deadline; the worker is stopped by PID.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from agents.fold import role_value
from krabka.format.partition import role_partition
from krabka.rules.state import RoleState
from tests.app.test_app_harness import AppGroup, AppWorker, poll

pytestmark = pytest.mark.integration

PARTITIONS = 16
ROLES = 10_000
VERSIONS = 4
"""Values per role in the changelog; the last one (`last_offset` = VERSIONS - 1) wins."""
START = 120.0
"""Seconds a worker may take from its spawn to ready with every role (2 cores)."""


def _role(i: int) -> str:
    return f"acme.recovered-{i:05d}"


async def _write_changelog(bootstrap: str, topic: str) -> None:
    """`VERSIONS` values of each of `ROLES` roles, committed in one transaction."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, PARTITIONS, 1,
                                            topic_configs={"cleanup.policy": "compact"})])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{topic}-writer",
                                linger_ms=20, max_batch_size=512 * 1024)
    await producer.start()
    try:
        async with producer.transaction():
            sends = []
            for version in range(VERSIONS):
                for i in range(ROLES):
                    role = _role(i)
                    partition = role_partition(role, PARTITIONS)
                    value = role_value.RoleValue(RoleState(role=role), partition,
                                                 last_offset=version)
                    sends.append(await producer.send(topic, role_value.encode(value),
                                                     key=role.encode(), partition=partition))
            await asyncio.gather(*sends)
    finally:
        await producer.stop()


@pytest.fixture
def group(kafka_bootstrap: str, tmp_path: Path):
    group = AppGroup(kafka_bootstrap, tmp_path, partitions=PARTITIONS)
    group.create_topics()
    try:
        yield group
    finally:
        group.stop_all()


RESTARTS = 2
"""Workers started one after the other, each with an empty data directory: without
the fix about two starts in three came up ready with roles missing."""


def test_a_worker_is_ready_only_with_every_role_of_the_changelog_in_its_table(group):
    asyncio.run(_write_changelog(group.bootstrap, f"{group.app_id}-role_state-changelog"))
    for _ in range(RESTARTS):
        worker = group.start(env={"COORDINATION_DEMO": "0"})
        try:
            _assert_recovered_when_ready(worker)
        finally:
            worker.stop()


def _assert_recovered_when_ready(worker: AppWorker) -> None:
    def ready():
        if not worker.alive():
            raise AssertionError(f"the worker exited:\n{worker.log_tail()}")
        status, _ = worker.get("/ready")
        return status == 200 or None
    poll(ready, START, "the worker ready")

    status, body = worker.get("/roles/?scope=local")
    assert status == 200
    recovered = {row["role"]: row["offset"] for row in body["roles"]}
    missing = sorted(set(map(_role, range(ROLES))) - recovered.keys())
    by_partition: dict[int, int] = {}
    for role in missing:
        partition = role_partition(role, PARTITIONS)
        by_partition[partition] = by_partition.get(partition, 0) + 1
    assert not missing, (f"ready with {len(missing)} of {ROLES} roles missing "
                         f"(per partition: {dict(sorted(by_partition.items()))})")
    assert set(recovered.values()) == {VERSIONS - 1}, "every role at its last value"

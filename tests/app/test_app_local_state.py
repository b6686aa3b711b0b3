"""A worker keeps its tables in its data directory across restarts, on the real broker.

A worker restarted with its data directory reads only the changelog records
after the offset its RocksDB recorded at its last commit, and serves the same
roles as a worker that read the whole changelog; a worker SIGKILLed while it
folds leaves only committed values behind. How much each start read is the
worker's own count, logged by its recovery ("table recovery: read N changelog
records"). Every wait polls a condition with a deadline; workers are stopped
by PID.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from tests.app.test_app_harness import AppGroup, AppWorker, poll, register_roles

pytestmark = pytest.mark.integration

PARTITIONS = 8
ROLES = 3_000
MEMBERS = 4
"""Registrations per role the killed worker folds: enough to be killed part-way."""
START = 180.0
"""Seconds a worker may take from its spawn to ready with every role folded (2 shared
cores fold a few hundred registrations a second)."""

RECOVERY_LINE = re.compile(r"table recovery: read (\d+) changelog records")


def _role(i: int) -> str:
    return f"acme.kept-{i:05d}"


def _roles() -> list[str]:
    return [_role(i) for i in range(ROLES)]


@pytest.fixture
def group(kafka_bootstrap: str, tmp_path: Path):
    group = AppGroup(kafka_bootstrap, tmp_path, partitions=PARTITIONS)
    group.create_topics()
    try:
        yield group
    finally:
        group.stop_all()


def _rows(worker: AppWorker) -> dict[str, Any] | None:
    """``GET /roles/?scope=local`` by role, without the status (computed at the read)."""
    status, body = worker.get("/roles/?scope=local")
    if status != 200:
        return None
    return {row["role"]: {k: v for k, v in row.items() if k != "status"}
            for row in body["roles"]}


def _ready_with_every_role(worker: AppWorker, members: int) -> dict[str, Any]:
    """The worker's roles once it is ready with every role and all `members` of each."""
    seen = "no answer"

    def ready() -> dict[str, Any] | None:
        nonlocal seen
        if not worker.alive():
            raise AssertionError(f"the worker exited:\n{worker.log_tail()}")
        status, _ = worker.get("/ready")
        rows = _rows(worker) if status == 200 else None
        if rows is None:
            seen = f"GET /ready {status}"
            return None
        folded = sum(row["members"] for row in rows.values())
        seen = f"{len(rows)} roles, {folded} registrations"
        return rows if len(rows) == ROLES and folded == ROLES * members else None
    try:
        rows: dict[str, Any] = poll(ready, START, "the worker ready with every role folded")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen: {seen}") from None
    return rows


def _recovery_reads(worker: AppWorker) -> list[int]:
    """The changelog records each recovery of this worker read, as it logged them."""
    return [int(m.group(1)) for m in RECOVERY_LINE.finditer(worker.log.read_text(errors="replace"))]


async def _committed_end(group: AppGroup) -> int:
    """The sum of the role_state changelog's last stable offsets."""
    consumer = AIOKafkaConsumer(bootstrap_servers=group.bootstrap,
                                isolation_level="read_committed", enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(f"{group.app_id}-role_state-changelog", p)
               for p in range(PARTITIONS)]
        return sum((await consumer.end_offsets(tps)).values())
    finally:
        await consumer.stop()


def _changelog_records(group: AppGroup) -> int:
    """The committed data records of both tables' changelogs."""
    return sum(len(group.read(f"{group.app_id}-{table}-changelog"))
               for table in ("role_state", "partition_state"))


def test_a_worker_restarted_with_its_data_directory_reads_only_the_changelog_after_it(group):
    asyncio.run(register_roles(group.bootstrap, group.state_topic, _roles(), PARTITIONS,
                                [f"m{m}" for m in range(3)]))
    first = group.start(env={"COORDINATION_DEMO": "0"})
    folded = _ready_with_every_role(first, 3)
    first.stop()
    changelog = _changelog_records(group)
    assert changelog >= ROLES

    again = group.start(first.port, env={"COORDINATION_DEMO": "0"})
    assert _ready_with_every_role(again, 3) == folded
    again.stop()
    reads = _recovery_reads(again)
    assert reads, f"no recovery logged:\n{again.log_tail()}"
    assert sum(reads) <= 2 * PARTITIONS, (
        f"the restart read {sum(reads)} of {changelog} changelog records")

    fresh = group.start(env={"COORDINATION_DEMO": "0"})
    assert _ready_with_every_role(fresh, 3) == folded
    fresh.stop()
    assert sum(_recovery_reads(fresh)) == changelog


def test_a_worker_killed_while_folding_restarts_with_only_what_was_committed(group):
    asyncio.run(register_roles(group.bootstrap, group.state_topic, _roles(), PARTITIONS,
                                [f"m{m}" for m in range(MEMBERS)]))
    first = group.start(env={"COORDINATION_DEMO": "0"})

    def folding() -> bool | None:
        if not first.alive():
            raise AssertionError(f"the worker exited:\n{first.log_tail()}")
        rows = _rows(first)
        folded = sum(row["members"] for row in (rows or {}).values())
        if not 0 < folded < ROLES * MEMBERS:
            return None
        return True if asyncio.run(_committed_end(group)) > 0 else None
    poll(folding, START, "the worker part-way through its fold, some of it committed",
         interval=0.05)
    first.kill()

    again = group.start(first.port, env={"COORDINATION_DEMO": "0"})
    kept = _ready_with_every_role(again, MEMBERS)
    again.stop()
    assert _recovery_reads(again), f"no recovery logged:\n{again.log_tail()}"

    fresh = group.start(env={"COORDINATION_DEMO": "0"})
    assert _ready_with_every_role(fresh, MEMBERS) == kept
    fresh.stop()

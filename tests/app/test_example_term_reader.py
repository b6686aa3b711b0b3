"""The Faust example reader of a term-mode output (examples/term_reader/faust_app.py)
on the real broker.

A term-mode leader writes, its successor's barrier follows, and a zombie
(a writer still stamping the old term) writes after it: the agent of
``faust -A examples.term_reader.faust_app worker`` admits the leaders'
records and drops the zombie's. Stopped and started again, the worker
restores its marks from the ``term-marks`` table's changelog and drops a
zombie record written while it was down, before it has read any barrier
in its new process. A partition whose records it never judged were
deleted (DeleteRecords, as retention does), with or without saved marks, is
seeded from the terms topic on its first record.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from tests.app.test_app_harness import AppGroup, AppWorker
from tests.support.polling import eventually
from tests.support.ports import free_port
from tests.support.term_output import OUTPUT_PARTITIONS, Setting

pytestmark = pytest.mark.integration

APP_MODULE = "examples.term_reader.faust_app"
START = 120.0  # start-up, group join, table recovery


def start_reader(group: AppGroup, setting: Setting, app_id: str) -> AppWorker:
    port = free_port()
    return group.start(port, app_module=APP_MODULE, env={
        "TERM_READER_TOPIC": setting.output,
        "TERM_READER_TERMS_TOPIC": setting.terms,
        "TERM_READER_ROLES": setting.role,
        "TERM_READER_PARTITIONS": str(OUTPUT_PARTITIONS),
        "TERM_READER_APP_ID": app_id,
        "TERM_READER_WEB_PORT": str(port),
        "TERM_READER_DATA_DIR": str(group.folder / f"reader-{port}"),
    })


async def seen(worker: AppWorker, values: set[str]) -> dict[str, Any]:
    """The worker's page once it has admitted every one of `values`."""

    async def page() -> dict[str, Any] | None:
        if not worker.alive():
            raise AssertionError(f"the reader exited:\n{worker.log_tail()}")
        try:
            status, body = await asyncio.to_thread(worker.get, "/term-reader/")
        except OSError:
            return None
        return body if status == 200 else None

    return await eventually(page, lambda body: body is not None and values <= {
        record["value"] for record in body["admitted"]}, START)


def story(worker: AppWorker) -> str:
    """The lines of the worker's log that say what it read, from where, and when."""
    words = ("admitted", "dropped", "generation", "Seek", "Resuming", "Fetcher", "Ready",
             "Traceback", "Error")
    return "\n".join(line for line in worker.log.read_text(errors="replace").splitlines()
                     if any(word in line for word in words))


async def test_the_faust_reader_drops_a_zombie_and_still_does_after_a_restart(
        kafka_bootstrap: str, tmp_path):
    setting = Setting(kafka_bootstrap)
    await setting.setup()
    group = AppGroup(kafka_bootstrap, tmp_path)
    app_id = f"term-reader-it-{uuid.uuid4().hex[:8]}"
    try:
        first = await setting.lead("a")
        await setting.write(first, b"a-1")
        await first.resign()
        second = await setting.lead("b")
        await setting.zombie_write(first.term, b"zombie-1")
        await setting.write(second, b"b-1")

        worker = start_reader(group, setting, app_id)
        body = await seen(worker, {"a-1", "b-1"})
        assert [r["value"] for r in body["admitted"]] == ["a-1", "b-1"], story(worker)
        assert body["dropped"] == {"stale": 1}, story(worker)
        await asyncio.to_thread(worker.stop)
        assert worker.process.returncode == 0, worker.log_tail()

        # While it is down: the zombie again, then the leader.
        await setting.zombie_write(first.term, b"zombie-2")
        await setting.write(second, b"b-2")
        restarted = start_reader(group, setting, app_id)
        body = await seen(restarted, {"b-2"})
        assert [r["value"] for r in body["admitted"]] == ["b-2"], story(restarted)
        assert body["dropped"] == {"stale": 1}, story(restarted)
        await asyncio.to_thread(restarted.stop)
        assert "Traceback" not in restarted.log.read_text(errors="replace")
        await second.resign()
    finally:
        await asyncio.to_thread(group.stop_all)
        await setting.close()


async def test_the_faust_reader_seeds_a_partition_whose_unread_records_were_deleted(
        kafka_bootstrap: str, tmp_path):
    setting = Setting(kafka_bootstrap)
    await setting.setup()
    group = AppGroup(kafka_bootstrap, tmp_path)
    app_id = f"term-reader-it-{uuid.uuid4().hex[:8]}"
    try:
        first = await setting.lead("a")
        await setting.write(first, b"a-1")
        worker = start_reader(group, setting, app_id)
        await seen(worker, {"a-1"})
        await asyncio.to_thread(worker.stop)
        assert worker.process.returncode == 0, worker.log_tail()

        # While it is down: the successor's barriers, then the zombie and the
        # successor; everything up to the zombie's record is deleted.
        await first.resign()
        second = await setting.lead("b")
        ends = await setting.ends()
        await setting.zombie_write(first.term, b"zombie")
        await setting.write(second, b"b-1")
        await setting.delete_below(ends)

        # Its saved marks are the first term's, and the record it expects is gone.
        restarted = start_reader(group, setting, app_id)
        body = await seen(restarted, {"b-1"})
        assert [r["value"] for r in body["admitted"]] == ["b-1"], story(restarted)
        assert body["dropped"] == {"stale": 1}, story(restarted)
        await asyncio.to_thread(restarted.stop)
        # A new group has no marks, and the log no longer starts at offset 0.
        fresh = start_reader(group, setting, f"{app_id}-fresh")
        body = await seen(fresh, {"b-1"})
        assert [r["value"] for r in body["admitted"]] == ["b-1"], story(fresh)
        assert body["dropped"] == {"stale": 1}, story(fresh)
        await asyncio.to_thread(fresh.stop)
        await second.resign()
    finally:
        await asyncio.to_thread(group.stop_all)
        await setting.close()

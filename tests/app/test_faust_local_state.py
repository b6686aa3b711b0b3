"""FAUST-17: a table partition's RocksDB holds only committed changelog records,
with the offset of the last, and a recovery trusts it only within the
changelog's committed range (`app.faust_changes.persisting`).

The store is the worker's own, on a real RocksDB in a temporary directory; the
commit and the broker's answers are stand-ins (the real broker's side is in
tests/app/test_app_local_state.py).
"""

from __future__ import annotations

import types
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from faust.types import TP

from agents.fold.agent import as_current_event
from app.faust_changes import ChangedApp
from app.faust_changes.persisting import COMMITTED_OFFSET_KEY, CommitMarked, InMemoryCommitted

TOPIC = "local-state-test-t-changelog"
TP0 = TP(TOPIC, 0)


class _Event:
    def __init__(self, partition: int) -> None:
        self.message = types.SimpleNamespace(partition=partition)


def _table(folder: Path) -> Any:
    app = ChangedApp("local-state-test", broker="kafka://127.0.0.1:1", store="rocksdb://",
                     datadir=folder)
    return app.Table("t", key_type=bytes, value_type=bytes, partitions=2)


@pytest.fixture
def table(tmp_path: Path) -> Any:
    table = _table(tmp_path)
    yield table
    for db in table.data._dbs.values():
        db.close()


def _set(table: Any, partition: int, key: bytes, value: bytes) -> None:
    with as_current_event(_Event(partition)):  # type: ignore[arg-type]
        table.data[key] = value


def _acknowledged(store: InMemoryCommitted, partition: int, offset: int, key: bytes,
                  value: bytes) -> None:
    """The broker acknowledged the changelog record of `key` at `offset`."""
    store.record_sent(store.state_for_write(partition), partition, offset, key, value)


def _on_disk(store: InMemoryCommitted, partition: int, key: bytes) -> bytes | None:
    value: bytes | None = store._db_for_partition(partition).get(key)  # type: ignore[attr-defined]
    return value


class _Consumer:
    """Faust's commit as the worker's consumer sees it: `during` runs while the
    transaction ends; then Faust tells the table manager, or the commit raises."""

    def __init__(self, app: Any, during: Any = None, error: Exception | None = None) -> None:
        self.app = app
        self.during = during
        self.error = error

    async def _commit_offsets(self, offsets: Any, start_new_transaction: bool = True) -> bool:
        if self.during is not None:
            await self.during()
        if self.error is not None:
            raise self.error
        self.app.tables.on_commit(offsets)
        return True


class _WorkerConsumer(CommitMarked, _Consumer):
    pass


STATE_TP = TP("state", 0)


async def test_a_value_set_is_served_from_memory_and_reaches_rocksdb_only_with_its_commit(table):
    store = table.data
    _set(table, 0, b"role", b"v1")
    with as_current_event(_Event(0)):  # type: ignore[arg-type]
        assert store[b"role"] == b"v1"
    _acknowledged(store, 0, 7, b"role", b"v1")
    assert _on_disk(store, 0, b"role") is None
    assert store.persisted_offset(TP0) is None

    assert await _WorkerConsumer(table.app)._commit_offsets({STATE_TP: 1})
    assert _on_disk(store, 0, b"role") == b"v1"
    assert store.persisted_offset(TP0) == 7


async def test_a_commit_writes_only_the_records_acknowledged_before_it_started(table):
    store = table.data
    _set(table, 0, b"role", b"v1")
    _acknowledged(store, 0, 3, b"role", b"v1")

    async def next_transaction() -> None:
        # Acknowledged while the commit ends: it may belong to the next transaction.
        _set(table, 0, b"role", b"v2")
        _acknowledged(store, 0, 4, b"role", b"v2")

    await _WorkerConsumer(table.app, during=next_transaction)._commit_offsets({STATE_TP: 1})
    assert (_on_disk(store, 0, b"role"), store.persisted_offset(TP0)) == (b"v1", 3)

    await _WorkerConsumer(table.app)._commit_offsets({STATE_TP: 2})
    assert (_on_disk(store, 0, b"role"), store.persisted_offset(TP0)) == (b"v2", 4)


async def test_a_commit_writes_the_records_its_producers_held_in_a_batch_when_it_started(table):
    store = table.data
    _set(table, 0, b"role", b"v1")

    class Lingering:
        """A producer holding the changelog record in an open batch: its flush sends
        it, and the broker acknowledges it."""

        async def flush(self) -> None:
            _acknowledged(store, 0, 3, b"role", b"v1")

    app = types.SimpleNamespace(tables=table.app.tables, producer=Lingering())
    await _WorkerConsumer(app)._commit_offsets({STATE_TP: 1})
    assert (_on_disk(store, 0, b"role"), store.persisted_offset(TP0)) == (b"v1", 3)


async def test_overlapping_commits_each_write_only_what_was_acknowledged_before_they_started(
        table):
    store = table.data
    _set(table, 0, b"role", b"v1")
    _acknowledged(store, 0, 3, b"role", b"v1")

    async def another_commit() -> None:
        # A second commit starts and ends while the first ends its transaction, and
        # a record is acknowledged after both started: neither covers it.
        _set(table, 0, b"role", b"v2")
        _acknowledged(store, 0, 4, b"role", b"v2")
        await _WorkerConsumer(table.app)._commit_offsets({STATE_TP: 2})
        _set(table, 0, b"role", b"v3")
        _acknowledged(store, 0, 5, b"role", b"v3")

    await _WorkerConsumer(table.app, during=another_commit)._commit_offsets({STATE_TP: 1})
    assert (_on_disk(store, 0, b"role"), store.persisted_offset(TP0)) == (b"v2", 4)


async def test_a_commit_writes_only_the_partitions_it_committed(table):
    store = table.data
    _set(table, 0, b"a", b"1")
    _acknowledged(store, 0, 3, b"a", b"1")
    _set(table, 1, b"b", b"1")
    _acknowledged(store, 1, 5, b"b", b"1")

    await _WorkerConsumer(table.app)._commit_offsets({STATE_TP: 1})
    assert store.persisted_offset(TP0) == 3
    assert store.persisted_offset(TP(TOPIC, 1)) is None
    assert _on_disk(store, 1, b"b") is None


async def test_after_a_failed_commit_nothing_more_of_its_partition_reaches_rocksdb(table):
    store = table.data
    _set(table, 0, b"role", b"v1")
    _acknowledged(store, 0, 3, b"role", b"v1")
    await _WorkerConsumer(table.app)._commit_offsets({STATE_TP: 1})
    _set(table, 0, b"role", b"v2")
    _acknowledged(store, 0, 4, b"role", b"v2")

    with pytest.raises(RuntimeError):
        await _WorkerConsumer(table.app, error=RuntimeError("fenced"))._commit_offsets(
            {STATE_TP: 2})
    _set(table, 0, b"role", b"v3")
    _acknowledged(store, 0, 6, b"role", b"v3")
    await _WorkerConsumer(table.app)._commit_offsets({STATE_TP: 3})
    assert (_on_disk(store, 0, b"role"), store.persisted_offset(TP0)) == (b"v1", 3)


async def test_a_send_that_failed_stops_its_partition_reaching_rocksdb(table):
    store = table.data
    _set(table, 0, b"role", b"v1")
    store.record_sent(store.state_for_write(0), 0, None, b"role", b"v1")
    _acknowledged(store, 0, 4, b"role", b"v1")
    await _WorkerConsumer(table.app)._commit_offsets({STATE_TP: 1})
    assert store.persisted_offset(TP0) is None


async def test_a_revoked_partition_forgets_its_uncommitted_values_and_late_acknowledgements(
        table):
    store = table.data
    _set(table, 0, b"role", b"v1")
    _acknowledged(store, 0, 3, b"role", b"v1")
    await _WorkerConsumer(table.app)._commit_offsets({STATE_TP: 1})
    _set(table, 0, b"role", b"v2")
    before = store.state_for_write(0)

    store.revoke_partitions(table, {TP0})
    store.record_sent(before, 0, 4, b"role", b"v2")  # acknowledged after the revoke
    with as_current_event(_Event(0)):  # type: ignore[arg-type]
        assert store[b"role"] == b"v1"
    await _WorkerConsumer(table.app)._commit_offsets({STATE_TP: 2})
    assert (_on_disk(store, 0, b"role"), store.persisted_offset(TP0)) == (b"v1", 3)


def test_a_reopened_store_serves_what_was_committed(tmp_path):
    first = _table(tmp_path)
    store = first.data
    store.apply_records(0, [(b"a", b"1"), (b"b", b"2"), (b"a", None)], 9)
    for db in store._dbs.values():
        db.close()

    again = _table(tmp_path).data
    try:
        assert again.persisted_offset(TP0) == 9
        with as_current_event(_Event(0)):  # type: ignore[arg-type]
            assert (again.get(b"a"), again.get(b"b")) == (None, b"2")
    finally:
        for db in again._dbs.values():
            db.close()


class _Broker:
    """A consumer's answers about the changelog: its committed range per partition."""

    def __init__(self, start: int, end: int) -> None:
        self.start = start
        self.end = end

    async def highwaters(self, *tps: TP) -> dict[TP, int]:
        return {tp: self.end for tp in tps}

    async def earliest_offsets(self, *tps: TP) -> dict[TP, int]:
        return {tp: self.start for tp in tps}


@pytest.mark.parametrize(("start", "end", "trusted"), [
    (0, 10, True),    # the record at 9 is committed
    (0, 9, False),    # 9 is past the last stable offset: never committed, or another topic
    (10, 20, True),   # nothing between 9 and the log start is missing
    (11, 20, False),  # the record at 10 is gone: the store cannot be brought up to date
])
async def test_a_local_state_is_trusted_only_within_the_changelogs_committed_range(
        table, start, end, trusted):
    store = table.data
    store.apply_records(0, [(b"role", b"v")], 9)
    recovery = table.app.tables.recovery
    recovery.tp_to_table[TP0] = table
    destination: Counter[TP] = Counter({TP0: store.persisted_offset(TP0)})

    await recovery._build_offsets(_Broker(start, end), {TP0}, destination, "standby")
    reads_from = 9 if trusted else max(start - 1, -1)
    assert destination[TP0] == reads_from
    assert store.persisted_offset(TP0) == (9 if trusted else None)
    with as_current_event(_Event(0)):  # type: ignore[arg-type]
        assert store.get(b"role") == (b"v" if trusted else None)


async def test_values_without_a_committed_offset_are_wiped(table):
    store = table.data
    # Faust's own store's layout: values written at once, its own offset key.
    db = store._db_for_partition(0)
    db[b"role"] = b"phantom"
    db[b"__faust\0offset__"] = b"12"
    recovery = table.app.tables.recovery
    recovery.tp_to_table[TP0] = table
    destination: Counter[TP] = Counter()
    destination[TP0] = store.persisted_offset(TP0)

    await recovery._build_offsets(_Broker(0, 20), {TP0}, destination, "standby")
    assert destination[TP0] == -1
    with as_current_event(_Event(0)):  # type: ignore[arg-type]
        assert store.get(b"role") is None
    assert COMMITTED_OFFSET_KEY not in dict(store._visible_items(store._db_for_partition(0)))


def test_a_reset_forgets_the_values_with_the_databases(table):
    store = table.data
    store.apply_records(0, [(b"role", b"v")], 9)
    with as_current_event(_Event(0)):  # type: ignore[arg-type]
        assert store.get(b"role") == b"v"

    store.reset_state()
    with as_current_event(_Event(0)):  # type: ignore[arg-type]
        assert store.get(b"role") is None
    assert store.persisted_offset(TP0) is None

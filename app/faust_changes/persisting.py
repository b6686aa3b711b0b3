"""FAUST-17: a table's values in memory, its local store the committed changelog.

Faust's RocksDB store writes a table value to disk at once, when the fold sets
it, and (under exactly_once) never writes the changelog offset it is at: the
table manager looks the pending offset up by the source partition committed,
but keeps it by the changelog partition written. A data directory left by a
worker therefore holds values of transactions the broker may have aborted, at
no known offset, and cannot be trusted.

Here, per table:

- `InMemoryCommitted` (the worker's store) keeps each partition's values in a
  dict the fold reads and writes; RocksDB is written only with changelog
  records known to be committed, in one write batch with the offset of the
  last of them (its own key, so a directory of another layout is never read
  as this one's);
- `RecordsSent` (the worker's table) hands each changelog record the broker
  acknowledged to its store, with its offset;
- `CommitMarked` (the worker's consumer) notes, as a commit starts, how many
  acknowledged records each store holds per partition: those, and only those,
  are in the transaction the commit ends (or in earlier, committed ones);
- `CommitPersists` (the worker's table manager) writes them to RocksDB once
  Faust reports the commit done, for the partitions it committed;
- `LocalStateChecked` (the worker's recovery) trusts a partition's store only
  if its offset lies in the changelog's committed range (from the log start
  to the last stable offset), wipes it otherwise, and reads every active
  partition's changelog from that offset to its last stable offset itself
  (`read_changelogs`): one read_committed consumer, ended by its position,
  not by Faust's idle polls.

So a store never holds a value the changelog has not committed, and what it
holds is the changelog up to its offset: a restarted worker reads only the
tail after it, and a worker without a data directory reads the whole
changelog the same way.
"""

from __future__ import annotations

import contextvars
import enum
import logging
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from faust.streams import current_event

__all__ = [
    "COMMITTED_OFFSET_KEY",
    "CommitMarked",
    "CommitPersists",
    "InMemoryCommitted",
    "LocalStateChecked",
    "RecordsSent",
    "Recovered",
    "read_changelogs",
]

log = logging.getLogger("app.faust_changes.persisting")

COMMITTED_OFFSET_KEY = b"__coordination\0committed_offset__"
"""The key of a partition's committed changelog offset in its RocksDB database."""

RECOVERY_FETCH_BYTES = 8 * 1024 * 1024
"""Bytes one changelog partition's fetch may bring back while recovering."""

Sent = tuple[int, bytes, bytes | None]
"""An acknowledged changelog record: its offset, key and value (None deletes)."""

class Trust(enum.Enum):
    """Whether a partition's acknowledged changelog records may reach RocksDB."""

    COMMITTED = "committed"
    """Those a commit covered are written once it is done."""
    DOUBTFUL = "doubtful"
    """A commit or a send of the partition failed: its acknowledged records may be
    aborted, so none is written while the partition is assigned here."""


@dataclass
class PartitionState:
    """One table partition in the worker's store, from its assignment to its revocation."""

    values: dict[bytes, bytes]
    """What the fold reads: the committed values and its own writes since."""
    sent: list[Sent] = field(default_factory=list)
    """Acknowledged changelog records not yet written to RocksDB, in acknowledgement order."""
    taken: int = 0
    """How many acknowledged records have left `sent` (written, or dropped as doubtful):
    ``taken + len(sent)`` numbers the acknowledgements, which a commit's mark counts."""
    trust: Trust = Trust.COMMITTED


Mark = tuple[PartitionState, int]
"""A partition's state as a commit starts, and how many of its acknowledgements it covers."""

_marks: contextvars.ContextVar[dict[int, dict[int, Mark]] | None] = contextvars.ContextVar(
    "commit_marks", default=None)
"""For the commit under way in this task: per store (by id), per partition, its mark.
Commits can overlap: each writes up to its own mark, of the state it marked."""


class InMemoryCommitted:
    """FAUST-17 on Faust's RocksDB ``Store``: values in memory, RocksDB only
    committed records with their offset. Keys and values are the store's
    encoded bytes, as Faust's RocksDB store keeps them."""

    offset_key = COMMITTED_OFFSET_KEY
    """Faust's store reads (`persisted_offset`) and hides this key."""

    app: Any
    table: Any
    _key_index: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.partitions: dict[int, PartitionState] = {}

    # -- what the fold reads and writes

    def _state(self, partition: int) -> PartitionState:
        state = self.partitions.get(partition)
        if state is None:
            db = self._db_for_partition(partition)  # type: ignore[attr-defined]
            values = dict(self._visible_items(db))  # type: ignore[attr-defined]
            state = self.partitions[partition] = PartitionState(values)
        return state

    def _event_partition(self) -> int | None:
        event = current_event()
        if event is None or self.table.is_global or self.table.use_partitioner:
            return None
        partition: int = event.message.partition
        return partition

    def _holding(self, key: bytes) -> Iterator[PartitionState]:
        """The partitions that may hold `key`: its own when known (the current event's,
        or the one it was last seen in), else every partition opened here."""
        partition = self._event_partition()
        if partition is None:
            partition = self._key_index.get(key)
        if partition is not None:
            yield self._state(partition)
            return
        opened = set(self._dbs) | set(self.partitions)  # type: ignore[attr-defined]
        for each in sorted(opened):
            yield self._state(each)

    def _get(self, key: bytes) -> bytes | None:
        for state in self._holding(key):
            value = state.values.get(key)
            if value is not None:
                return value
        return None

    def _contains(self, key: bytes) -> bool:
        return self._get(key) is not None

    def _set(self, key: bytes, value: bytes) -> None:
        event = current_event()
        if event is None:
            raise TypeError("a table value is set only while an event is processed")
        partition: int = event.message.partition
        self._state(partition).values[key] = value
        self._key_index[key] = partition

    def _del(self, key: bytes) -> None:
        for state in self._holding(key):
            state.values.pop(key, None)

    def _active_states(self) -> Iterator[PartitionState]:
        actives = self.app.assignor.assigned_actives()
        topic = self.table.changelog_topic_name
        for tp in actives:
            if tp.topic == topic:
                yield self._state(tp.partition)

    def _size(self) -> int:
        return sum(len(state.values) for state in self._active_states())

    def _iterkeys(self) -> Iterator[bytes]:
        for state in self._active_states():
            yield from list(state.values)

    def _itervalues(self) -> Iterator[bytes]:
        for state in self._active_states():
            yield from list(state.values.values())

    def _iteritems(self) -> Iterator[tuple[bytes, bytes]]:
        for state in self._active_states():
            yield from list(state.values.items())

    # -- what is written to RocksDB

    def state_for_write(self, partition: int) -> PartitionState:
        """The state a changelog record of `partition` about to be sent belongs to."""
        return self._state(partition)

    def record_sent(self, state: PartitionState, partition: int, offset: int | None,
                    key: bytes, value: bytes | None) -> None:
        """A changelog record of `partition`, written while `state` was its state, that
        the broker acknowledged at `offset` (None: its send failed)."""
        if self.partitions.get(partition) is not state:
            return  # revoked since: the state assigned again starts from RocksDB
        if offset is None:
            self.commit_failed(partition)
        elif state.trust is Trust.COMMITTED:
            state.sent.append((offset, key, value))

    def marks(self) -> dict[int, Mark]:
        """Per partition, what a commit starting now covers: every record acknowledged
        so far, of the partition's current state."""
        return {partition: (state, state.taken + len(state.sent))
                for partition, state in self.partitions.items() if state.sent}

    def persist(self, partition: int, mark: Mark) -> None:
        """Write the acknowledged records of `partition` up to `mark`, now committed,
        with the last one's offset, to RocksDB in one batch."""
        state, upto = mark
        count = upto - state.taken
        if (self.partitions.get(partition) is not state or state.trust is Trust.DOUBTFUL
                or count <= 0):
            return
        records, state.sent = state.sent[:count], state.sent[count:]
        state.taken += count
        records.sort(key=lambda record: record[0])
        self._write(partition, [(key, value) for _, key, value in records], records[-1][0])

    def commit_failed(self, partition: int) -> None:
        """A commit of `partition` failed: write nothing more of it while it is here."""
        state = self.partitions.get(partition)
        if state is not None:
            state.trust = Trust.DOUBTFUL
            state.taken += len(state.sent)
            state.sent.clear()

    def apply_records(self, partition: int, records: Iterable[tuple[bytes, bytes | None]],
                      offset: int) -> None:
        """Committed changelog records of `partition` up to `offset`, read by the recovery."""
        records = list(records)
        self._write(partition, records, offset)
        state = self.partitions.get(partition)
        if state is not None:
            for key, value in records:
                if value is None:
                    state.values.pop(key, None)
                else:
                    state.values[key] = value

    def apply_changelog_batch(self, batch: Iterable[Any], to_key: Callable[[Any], Any],
                              to_value: Callable[[Any], Any]) -> None:
        # Faust's standby recovery: committed records, applied as `apply_records`.
        by_partition: dict[int, list[Any]] = {}
        for event in batch:
            by_partition.setdefault(event.message.partition, []).append(event.message)
        for partition, messages in by_partition.items():
            self.apply_records(partition, [(m.key, m.value) for m in messages],
                               max(m.offset for m in messages))

    def _write(self, partition: int, records: Iterable[tuple[bytes, bytes | None]],
               offset: int) -> None:
        import rocksdict

        batch = rocksdict.WriteBatch(raw_mode=True)
        for key, value in records:
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        batch.put(self.offset_key, str(offset).encode())
        self._db_for_partition(partition).write(batch)  # type: ignore[attr-defined]

    def set_persisted_offset(self, tp: Any, offset: int) -> None:
        # Only `persist` and `apply_records` record an offset, with its records.
        pass

    # -- what a recovery finds

    def holds_data(self, partition: int) -> bool:
        """Whether `partition`'s RocksDB holds anything (an offset or a value)."""
        db = self._db_for_partition(partition)  # type: ignore[attr-defined]
        iterator = db.iter()
        iterator.seek_to_first()
        return bool(iterator.valid())

    def wipe(self, partition: int) -> None:
        """Remove `partition`'s local state: it is read again from the changelog."""
        self.partitions.pop(partition, None)
        db = self._dbs.pop(partition, None)  # type: ignore[attr-defined]
        if db is not None:
            db.close()
        shutil.rmtree(self.partition_path(partition),  # type: ignore[attr-defined]
                      ignore_errors=True)

    def reset_state(self) -> None:
        # ``faust reset``: Faust's removes the databases; the values go with them.
        self.partitions.clear()
        super().reset_state()  # type: ignore[misc]

    def revoke_partitions(self, table: Any, tps: set[Any]) -> None:
        # Its values not yet committed are gone with it: a partition assigned again
        # starts from what RocksDB holds, and the changelog after it.
        for tp in tps:
            if tp.topic in table.changelog_topic.topics:
                self.partitions.pop(tp.partition, None)
        super().revoke_partitions(table, tps)  # type: ignore[misc]


class RecordsSent:
    """FAUST-17 on Faust's ``Table``: its RocksDB store is the worker's
    (`InMemoryCommitted`), and each changelog record the broker acknowledged goes
    to that store with its offset and the partition state it was written in, in
    both processing guarantees (the store writes it to RocksDB once the commit
    after it is done)."""

    RocksDBStore: type
    data: Any

    def _new_store_by_url(self, url: Any) -> Any:
        from faust import stores
        from faust.stores.rocksdb import Store as RocksDBStore

        if stores.by_url(url) is not RocksDBStore:
            return super()._new_store_by_url(url)  # type: ignore[misc]
        return self.RocksDBStore(
            url, self.app, self,  # type: ignore[attr-defined]
            table_name=self.name, key_type=self.key_type,  # type: ignore[attr-defined]
            key_serializer=self.key_serializer,  # type: ignore[attr-defined]
            value_serializer=self.value_serializer,  # type: ignore[attr-defined]
            value_type=self.value_type, loop=self.loop,  # type: ignore[attr-defined]
            options=self.options)  # type: ignore[attr-defined]

    def send_changelog(self, partition: int | None, key: Any, value: Any,
                       key_serializer: Any = None, value_serializer: Any = None) -> Any:
        store = self.data
        if not isinstance(store, InMemoryCommitted) or partition is None:
            return super().send_changelog(  # type: ignore[misc]
                partition, key, value, key_serializer, value_serializer)
        # Faust's, with the acknowledgement handed to the store with the state the
        # write belongs to.
        state = store.state_for_write(partition)
        if key_serializer is None:
            key_serializer = self.key_serializer  # type: ignore[attr-defined]
        if value_serializer is None:
            value_serializer = self.value_serializer  # type: ignore[attr-defined]
        encoded = (store._encode_key(key),  # type: ignore[attr-defined]
                   None if value is None else store._encode_value(value))  # type: ignore[attr-defined]

        def acknowledged(fut: Any) -> None:
            failed = fut.cancelled() or fut.exception() is not None
            offset = None if failed else fut.result().offset
            store.record_sent(state, partition, offset, *encoded)

        return self.changelog_topic.send_soon(  # type: ignore[attr-defined]
            key=key, value=value, partition=partition, key_serializer=key_serializer,
            value_serializer=value_serializer, callback=acknowledged,
            eager_partitioning=True)


def _stores(app: Any) -> Iterator[InMemoryCommitted]:
    for table in app.tables.values():
        if isinstance(table.data, InMemoryCommitted):
            yield table.data


class CommitMarked:
    """FAUST-17 on Faust's ``Consumer``: a commit notes first how many acknowledged
    changelog records each store holds per partition; a commit that fails marks
    its partitions' stores doubtful."""

    app: Any

    async def _commit_offsets(self, offsets: Mapping[Any, int],
                              start_new_transaction: bool = True) -> bool:
        # The records acknowledged before the commit starts are in the transaction
        # it ends or in earlier ones; any acknowledged later may be in the next. The
        # producers' batches held open (a linger) are sent and acknowledged first:
        # the commit would send them anyway, and unacknowledged they would reach
        # RocksDB only with the next commit (after the last one, never).
        await self.app.producer.flush()
        token = _marks.set({id(store): store.marks() for store in _stores(self.app)})
        try:
            did_commit: bool = await super()._commit_offsets(  # type: ignore[misc]
                offsets, start_new_transaction)
        except BaseException:
            for store in _stores(self.app):
                for tp in offsets:
                    store.commit_failed(tp.partition)
            raise
        finally:
            _marks.reset(token)
        return did_commit


class CommitPersists:
    """FAUST-17 on Faust's ``TableManager``: once a commit is done, the stores write
    the records it covered of the partitions it committed to RocksDB."""

    app: Any

    def on_commit(self, offsets: Mapping[Any, int]) -> None:
        super().on_commit(offsets)  # type: ignore[misc]
        marks = _marks.get()
        if marks is None:
            return
        for store in _stores(self.app):
            marked = marks.get(id(store), {})
            for tp in offsets:
                # A table partition is written while folding the state partition of
                # the same number (the tables are co-partitioned with it).
                mark = marked.get(tp.partition)
                if mark is not None:
                    store.persist(tp.partition, mark)


@dataclass(frozen=True)
class Recovered:
    """What one recovery round read of the changelogs itself."""

    partitions: int
    records: int
    seconds: float
    wiped: int


class LocalStateChecked:
    """FAUST-17 on Faust's ``Recovery``: a partition's local state is trusted only
    within the changelog's committed range, and the active partitions are read
    to their last stable offset in bulk before Faust's own recovery looks."""

    app: Any
    tp_to_table: Any
    active_highwaters: Any
    _recovery_started_at: float | None
    last_recovered: Recovered | None = None

    async def _build_offsets(self, consumer: Any, tps: set[Any], destination: Any,
                             title: str) -> None:
        # Faust's: each partition starts at the later of its store's offset and the
        # offset before the log start.
        await super()._build_offsets(consumer, tps, destination, title)  # type: ignore[misc]
        ours = {tp for tp in tps if isinstance(self.tp_to_table[tp].data, InMemoryCommitted)}
        if title == "active":
            # The recovery has just asked for them: the last stable offset, less one.
            ends = {tp: self.active_highwaters[tp] + 1 for tp in ours
                    if self.active_highwaters.get(tp) is not None}
        else:
            kept = {tp for tp in ours if self.tp_to_table[tp].persisted_offset(tp) is not None}
            ends = await consumer.highwaters(*kept) if kept else {}
        wiped = self._check_local_state(ours, destination, ends)
        if title == "active":
            await self._read_active(ours, destination, wiped)

    def _check_local_state(self, tps: set[Any], destination: Any,
                           ends: Mapping[Any, int | None]) -> int:
        """Wipe the store of each partition of `tps` whose local state is not a prefix
        of its changelog's committed records (`ends`: the last stable offsets);
        return how many were wiped."""
        wiped = 0
        for tp in tps:
            store: InMemoryCommitted = self.tp_to_table[tp].data
            persisted = store.persisted_offset(tp)  # type: ignore[attr-defined]
            start = destination[tp]
            end = ends.get(tp)
            if persisted is None:
                if not store.holds_data(tp.partition):
                    continue
                reason = "it holds values without a committed offset"
            elif start != persisted:
                reason = (f"the changelog's first record is at {start + 1}, after the "
                          f"{persisted + 1} it would read next")
            elif end is None or persisted >= end:
                reason = (f"its offset {persisted} is not below the changelog's last stable "
                          f"offset {end}")
            else:
                continue
            log.warning("%s: the local state is not trusted (%s): read again from the "
                        "changelog", tp, reason)
            store.wipe(tp.partition)
            if start == persisted:
                destination[tp] = -1  # from the log start
            wiped += 1
        return wiped

    async def _read_active(self, tps: set[Any], destination: Any, wiped: int) -> None:
        behind = {tp: destination[tp] for tp in tps
                  if self.active_highwaters.get(tp) is not None
                  and destination[tp] < self.active_highwaters[tp]}
        started = time.perf_counter()
        records = 0
        if behind:
            # This step runs under Faust's request timeout: what is not read by half
            # of it is left to Faust's own recovery loop, from where this read ended.
            records, reached = await read_changelogs(
                self.app, {tp: offset + 1 for tp, offset in behind.items()},
                {tp: self.active_highwaters[tp] + 1 for tp in behind},
                self._apply, time.monotonic() + self.app.conf.broker_request_timeout / 2)
            for tp, position in reached.items():
                destination[tp] = min(position - 1, self.active_highwaters[tp])
        self.last_recovered = Recovered(len(behind), records,
                                        time.perf_counter() - started, wiped)
        left = sum(1 for tp in behind if destination[tp] < self.active_highwaters[tp])
        log.info("table recovery: read %d changelog records of %d partitions in %.3f s "
                 "(%d of %d partitions past their local offset; %d wiped; %d left to "
                 "Faust's recovery loop)", records, len(behind), self.last_recovered.seconds,
                 len(behind), len(tps), wiped, left)

    async def on_recovery_completed(self, generation_id: int = 0) -> None:
        await super().on_recovery_completed(generation_id)  # type: ignore[misc]
        started = self._recovery_started_at
        recovered = self.last_recovered
        if started is not None and recovered is not None:
            log.info("table recovery complete in %.3f s from its start (%d changelog "
                     "records read)", time.monotonic() - started, recovered.records)

    def _apply(self, tp: Any, records: list[Any], offset: int) -> None:
        store: InMemoryCommitted = self.tp_to_table[tp].data
        store.apply_records(tp.partition, [(r.key, r.value) for r in records], offset)


async def read_changelogs(app: Any, starts: Mapping[Any, int], ends: Mapping[Any, int],
                          apply: Callable[[Any, list[Any], int], None],
                          deadline: float) -> tuple[int, dict[Any, int]]:
    """Read each changelog partition of `starts` from its start towards its end (the
    last stable offset the recovery found, exclusive), handing each fetched batch to
    `apply` with the last offset read, until every partition is at its end or the
    monotonic `deadline` has passed; return the records read and the position each
    partition reached.

    A partition is done when the consumer's position reaches its end: a position
    counts the control records of the transactions too, which no record shows."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth, server_list

    conf = app.conf
    transport = app.transport
    consumer = AIOKafkaConsumer(
        bootstrap_servers=server_list(transport.url, transport.default_port),
        client_id=f"{conf.broker_client_id}-recovery", group_id=None,
        enable_auto_commit=False, auto_offset_reset="earliest",
        isolation_level="read_committed" if app.in_transaction else "read_uncommitted",
        max_partition_fetch_bytes=RECOVERY_FETCH_BYTES, fetch_max_wait_ms=100,
        request_timeout_ms=int(conf.broker_request_timeout * 1000.0),
        **credentials_to_aiokafka_auth(conf.broker_credentials, conf.ssl_context))
    await consumer.start()
    try:
        kafka_tp = {tp: TopicPartition(tp.topic, tp.partition) for tp in starts}
        ours = {kafka: tp for tp, kafka in kafka_tp.items()}
        consumer.assign(list(kafka_tp.values()))
        for tp, start in starts.items():
            consumer.seek(kafka_tp[tp], start)
        reached = dict(starts)
        pending = {kafka_tp[tp] for tp in starts if starts[tp] < ends[tp]}
        records = 0
        while pending and time.monotonic() < deadline:
            fetched = await consumer.getmany(*pending, timeout_ms=100)
            for kafka, batch in fetched.items():
                if batch:
                    apply(ours[kafka], batch, batch[-1].offset)
                    records += len(batch)
            for kafka in list(pending):
                tp = ours[kafka]
                reached[tp] = await consumer.position(kafka)
                if reached[tp] >= ends[tp]:
                    pending.discard(kafka)
        return records, reached
    finally:
        await consumer.stop()

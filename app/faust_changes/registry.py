"""Every change the worker makes to faust-streaming, mode-streaming and aiokafka,
declared once.

A change's id follows its upstream report in docs/upstream/ (``FAUST-n`` for
faust-streaming, ``AIOKAFKA-n`` for aiokafka); the record says whether it fixes
a bug or a slow path, the private names it touches (`INTERNALS` derives from
them, and a unit test checks each still exists), the versions it was written
for, the invariant it restores, the upstream issue it matches, and the mixin it
adds to each of the worker's own subclasses of Faust's classes
(`app.faust_changes.classes` builds them; Faust's classes are never changed).

A change that copies a Faust method, or rests on the order of Faust's steps
(``exact``), is applied only on the exact versions it was written for: under
``COORDINATION_ALLOW_UNTESTED_FAUST=1`` with another version the worker applies
none of them and says which it left out.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from app.faust_changes import committing, fetching, persisting, producing, recovering
from app.faust_internals import FAUST, MODE
from krabka.kafka.aiokafka_internals import AIOKAFKA
from krabka.runtime.versions import DependencyRange

__all__ = ["CHANGES", "INTERNALS", "Change", "Kind", "Seam", "applicable"]


class Kind(enum.Enum):
    BUG = "bug"
    SPEED = "speed"


class Seam(enum.Enum):
    """A Faust (or mode) class the worker's app builds a subclass of, and where from."""

    CONSUMER = "faust.transport.drivers.aiokafka:Consumer"
    """Through the worker's transport (``Transport.Consumer``)."""
    CONSUMER_THREAD = "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread"
    """Through the worker's consumer (``Consumer._new_consumer_thread``)."""
    PRODUCER = "faust.transport.drivers.aiokafka:Producer"
    """Through the worker's transport (``Transport.Producer``)."""
    PRODUCER_BUFFER = "faust.transport.producer:ProducerBuffer"
    """Through the worker's producer, which builds its buffer."""
    TRANSACTION_MANAGER = "faust.transport.consumer:TransactionManager"
    """Through the worker's transport (``Transport.TransactionManager``)."""
    TABLE_MANAGER = "faust.tables.manager:TableManager"
    """Through the app's ``TableManager`` setting."""
    RECOVERY = "faust.tables.recovery:Recovery"
    """Through the worker's table manager, which builds its recovery."""
    TABLE = "faust.tables.table:Table"
    """Through the app's ``Table`` setting."""
    STORE = "faust.stores.rocksdb:Store"
    """Through the worker's table, which builds its RocksDB store (``Table._new_store_by_url``)."""
    FLOW_CONTROL = "mode.utils.queues:FlowControlEvent"
    """Through the worker's app (``App.flow_control``)."""


@dataclass(frozen=True)
class Change:
    id: str
    """``FAUST-n`` or ``AIOKAFKA-n``: the report in docs/upstream/ of that name."""
    kind: Kind
    title: str
    invariant: str
    """What holds with the change that does not without it."""
    touches: tuple[str, ...]
    """The private names it relies on, as ``"module:Object.attribute"``."""
    written_for: tuple[DependencyRange, ...]
    exact: bool
    """Whether it copies Faust's code or rests on the order of its steps: then it is
    applied only on the versions it was written for."""
    upstream: str
    """The matching upstream issue, if any, and the report's own status."""
    mixins: Mapping[Seam, type] = field(default_factory=dict)

    def written_for_versions(self, versions: Mapping[str, str]) -> bool:
        """Whether every distribution it was written for is at a version it covers."""
        return all(each.covers(versions[each.distribution]) for each in self.written_for)


UNFILED = "report ready, not filed"

CHANGES: tuple[Change, ...] = (
    Change(
        id="FAUST-1", kind=Kind.BUG,
        title="A rebalance during table recovery crashes the worker",
        invariant="A recovery step awaited while a newer rebalance is pending never "
                  "starts: the recovery restarts for the new assignment instead of "
                  "seeking the new standbys to offsets it never read (None).",
        touches=("faust.tables.recovery:Recovery._wait",
                 "faust.tables.recovery:Recovery._restart_recovery",
                 "faust.tables.recovery:Recovery.signal_recovery_start",
                 "faust.tables.recovery:RebalanceAgain"),
        written_for=(FAUST, MODE), exact=True,
        upstream=f"{UNFILED}; no open upstream issue matches "
                 "(faust-streaming/faust#44 and #54, closed, are earlier crashes of the same step)",
        mixins={Seam.RECOVERY: recovering.SupersededStepsNeverStart}),
    Change(
        id="FAUST-2", kind=Kind.SPEED,
        title="Under exactly_once every active table recovery waits at least 10 s",
        invariant="A transactional changelog's end is found 0.5 s after its last record: "
                  "the recovery's idle polls, after two of which it compares the "
                  "consumer's position with the highwater, last 0.25 s, not 5 s.",
        touches=("faust.tables.manager:TableManager._changelog_queue",
                 "faust.tables.recovery:Recovery._slurp_changelogs.fun"),
        written_for=(FAUST, MODE), exact=True,
        upstream=f"{UNFILED}; faust-streaming/faust#47 (closed) reported exactly_once "
                 "recovery hanging at the same step",
        mixins={Seam.TABLE_MANAGER: recovering.ChangelogQueueIdles}),
    Change(
        id="FAUST-4", kind=Kind.BUG,
        title="Under exactly_once a commit leaves buffered table writes out of its transaction",
        invariant="A transactional commit carries no offset ahead of its event's table "
                  "writes: it first sends every write buffered or being sent, or, when "
                  "none is sent for FLUSH_SECONDS, is put off to the next commit.",
        touches=("faust.transport.drivers.aiokafka:Producer.commit_transactions",
                 "faust.transport.producer:ProducerBuffer._send_pending",
                 "faust.transport.consumer:Consumer._commit_offsets"),
        written_for=(FAUST,), exact=False,
        upstream=f"{UNFILED}; matches faust-streaming/faust#177 (open: a producer sending "
                 "outside a transaction under exactly_once)",
        mixins={Seam.PRODUCER: producing.CommitFlushesFirst,
                Seam.PRODUCER_BUFFER: producing.SendsCounted,
                Seam.CONSUMER: committing.StalledFlushPutsCommitOff}),
    Change(
        id="FAUST-5", kind=Kind.BUG,
        title="Under exactly_once a table write made after the final commit crashes the buffer",
        invariant="A table write whose transaction has ended is dropped, not a crash: its "
                  "event's offset was not committed, so the next owner folds it again.",
        touches=("faust.transport.producer:ProducerBuffer._send_pending",),
        written_for=(FAUST,), exact=False,
        upstream=f"{UNFILED}; no upstream issue found",
        mixins={Seam.PRODUCER_BUFFER: producing.LateWritesDropped}),
    Change(
        id="FAUST-6", kind=Kind.BUG,
        title="A table recovery can end a partition before its fetched records are applied",
        invariant="A changelog partition's position is never past a record the consumer "
                  "has taken and the recovery not yet applied, so a partition is never "
                  "ended ahead of its records.",
        touches=("faust.transport.consumer:Consumer._wait_next_records",
                 "faust.transport.consumer:ThreadDelegateConsumer.position"),
        written_for=(FAUST, MODE), exact=True,
        upstream=f"{UNFILED}; no upstream issue found",
        mixins={Seam.CONSUMER: recovering.PositionNotPastInFlight}),
    Change(
        id="FAUST-7", kind=Kind.SPEED,
        title="Under exactly_once the partitions of a commit end their transactions in turn",
        invariant="The partitions of a commit end their transactions side by side, each "
                  "under its own lock; the first failure is raised once all have ended.",
        touches=("faust.transport.drivers.aiokafka:Producer.commit_transactions",
                 "faust.transport.drivers.aiokafka:Producer._trn_locks",
                 "faust.transport.drivers.aiokafka:Producer._transaction_producers",
                 "aiokafka.producer.producer:AIOKafkaProducer._txn_manager",
                 "aiokafka.producer.transaction_manager:TransactionManager.is_in_transaction"),
        written_for=(FAUST, MODE), exact=True,
        upstream=f"{UNFILED}; no upstream issue found",
        mixins={Seam.PRODUCER: producing.CommitsSideBySide}),
    Change(
        id="FAUST-8", kind=Kind.SPEED,
        title="The consumer thread's fetches wait up to 100 ms behind an undrained partition",
        invariant="A fetch for the consumer thread's other partitions is sent while one "
                  "partition still holds records the main loop has not taken.",
        touches=("faust.transport.drivers.aiokafka:AIOKafkaConsumerThread.on_start",
                 "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread._consumer",
                 "aiokafka.consumer.consumer:AIOKafkaConsumer._fetcher",
                 "aiokafka.consumer.fetcher:Fetcher._prefetch_backoff"),
        written_for=(FAUST, AIOKAFKA), exact=False,
        upstream=f"{UNFILED}; no upstream issue found",
        mixins={Seam.CONSUMER_THREAD: fetching.NoFetchBackoff}),
    Change(
        id="FAUST-9", kind=Kind.SPEED,
        title="The worker consumer's 1.5 s long poll delays every ListOffsets of an idle worker",
        invariant="A ListOffsets behind a fetch on the consumer thread's connection waits "
                  "at most 0.1 s for it.",
        touches=("faust.transport.drivers.aiokafka:AIOKafkaConsumerThread.on_start",
                 "aiokafka.consumer.fetcher:Fetcher._fetch_max_wait_ms"),
        written_for=(FAUST, AIOKAFKA), exact=False,
        upstream=f"{UNFILED}; no upstream issue found",
        mixins={Seam.CONSUMER_THREAD: fetching.ShortLongPoll}),
    Change(
        id="FAUST-10", kind=Kind.SPEED,
        title="TableManager.on_start sleeps one second before every table recovery",
        invariant="The table manager closes its list of tables and starts the recovery "
                  "at once; a table made later is refused by Faust, never lost.",
        touches=("faust.tables.manager:TableManager.on_start",
                 "faust.tables.manager:TableManager._update_channels"),
        written_for=(FAUST, MODE), exact=True,
        upstream=f"{UNFILED}; no upstream issue found",
        mixins={Seam.TABLE_MANAGER: recovering.TableManagerStartsAtOnce}),
    Change(
        id="FAUST-11", kind=Kind.BUG,
        title="Under exactly_once a partition that comes back reuses a fenced producer",
        invariant="After a rebalance no transactional producer is kept for a partition "
                  "that is not active here: one assigned back gets a new producer, which "
                  "fences the other worker's instead of being fenced.",
        touches=("faust.transport.consumer:TransactionManager.on_rebalance",
                 "faust.transport.consumer:TransactionManager._tps_to_transactional_ids",
                 "faust.transport.drivers.aiokafka:Producer.stop_transaction"),
        written_for=(FAUST,), exact=False,
        upstream=f"{UNFILED}; matches faust-streaming/faust#323 (open: ProducerFenced "
                 "crash on rebalance under exactly_once)",
        mixins={Seam.TRANSACTION_MANAGER: producing.FencedProducersStopped}),
    Change(
        id="FAUST-12", kind=Kind.BUG,
        title="A record is skipped for good when handed over during the seek that ends a "
              "recovery",
        invariant="Every record of a stream partition reaches the streams once: a resume "
                  "of an active flow keeps the queued events, and a record fetched again "
                  "after a seek is not taken for read and skipped.",
        touches=("faust.transport.consumer:Consumer._drain_messages",
                 "faust.transport.consumer:Consumer._is_changelog_tp",
                 "faust.transport.consumer:Consumer.seek",
                 "faust.tables.recovery:Recovery.on_recovery_completed",
                 "mode.utils.queues:FlowControlEvent.resume",
                 "mode.utils.queues:FlowControlEvent.clear"),
        written_for=(FAUST, MODE), exact=True,
        upstream=f"{UNFILED}; matches faust-streaming/faust#596 (open: a race in recovery "
                 "leaves gaps in the acked offsets)",
        mixins={Seam.CONSUMER: recovering.HandedOnce,
                Seam.FLOW_CONTROL: recovering.ActiveFlowKeepsQueues}),
    Change(
        id="FAUST-13", kind=Kind.BUG,
        title="Under exactly_once a recovery can end a partition before it has read any of it",
        invariant="Until the recovery has sought an active changelog partition, its "
                  "position is the offset the recovery will read it from.",
        touches=("faust.tables.recovery:Recovery._build_highwaters",
                 "faust.tables.recovery:Recovery._seek_offsets",
                 "faust.tables.recovery:Recovery.active_offsets"),
        written_for=(FAUST, MODE), exact=True,
        upstream=f"{UNFILED}; no upstream issue found",
        mixins={Seam.RECOVERY: recovering.UnsoughtNoted,
                Seam.CONSUMER: recovering.PositionOfUnsought}),
    Change(
        id="FAUST-14", kind=Kind.BUG,
        title="A fetch while no partition is active hands over records of paused partitions",
        invariant="aiokafka is asked only for the active partitions' records, and for "
                  "none while none is active.",
        touches=("faust.transport.drivers.aiokafka:AIOKafkaConsumerThread._fetch_records",
                 "aiokafka.consumer.fetcher:Fetcher.fetched_records"),
        written_for=(FAUST, AIOKAFKA), exact=False,
        upstream=f"{UNFILED}; no upstream issue found",
        mixins={Seam.CONSUMER_THREAD: fetching.ActivePartitionsOnly}),
    Change(
        id="FAUST-15", kind=Kind.BUG,
        title="Under exactly_once a recovery's highwater is -1 for a partition not yet fetched",
        invariant="A changelog partition's recovery highwater is the broker's last stable "
                  "offset, never aiokafka's cache, which is empty until a fetch.",
        touches=("faust.transport.drivers.aiokafka:AIOKafkaConsumerThread._highwaters",
                 "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread._ensure_consumer"),
        written_for=(FAUST, MODE), exact=True,
        upstream=f"{UNFILED}; matches faust-streaming/faust#158 (open: persisted offset "
                 "higher than the highwater)",
        mixins={Seam.CONSUMER_THREAD: fetching.HighwatersFromTheBroker}),
    Change(
        id="FAUST-16", kind=Kind.BUG,
        title="An at-least-once commit can go ahead of table writes still buffered",
        invariant="An at-least-once commit carries no offset ahead of its event's table "
                  "writes: the flush before it drains the buffer, or, when no write is "
                  "sent for FLUSH_SECONDS, the commit is put off to the next (FAUST-4's "
                  "consumer change).",
        touches=("faust.transport.drivers.aiokafka:Producer.flush",),
        written_for=(FAUST,), exact=False,
        upstream=f"{UNFILED}; no upstream issue found",
        mixins={Seam.PRODUCER: producing.AtLeastOnceFlushDrains}),
    Change(
        id="FAUST-17", kind=Kind.SPEED,
        title="A restarted worker cannot trust its data directory, so it reads every "
              "changelog whole",
        invariant="A table partition's RocksDB holds exactly the changelog's committed "
                  "records up to the offset it records, written in one batch with it: a "
                  "restart reads only the records after it, and a store whose offset is "
                  "outside the changelog's committed range is wiped and read whole. The "
                  "fold reads and writes the values in memory.",
        touches=("faust.tables.base:Collection._new_store_by_url",
                 "faust.tables.base:Collection.send_changelog",
                 "faust.tables.manager:TableManager.on_commit",
                 "faust.transport.consumer:Consumer._commit_offsets",
                 "faust.tables.recovery:Recovery._build_offsets",
                 "faust.tables.recovery:Recovery.active_highwaters",
                 "faust.tables.recovery:Recovery.tp_to_table",
                 "faust.tables.recovery:Recovery.on_recovery_completed",
                 "faust.tables.recovery:Recovery._recovery_started_at",
                 "faust.stores.rocksdb:Store._db_for_partition",
                 "faust.stores.rocksdb:Store._dbs",
                 "faust.stores.rocksdb:Store._visible_items",
                 "faust.stores.rocksdb:Store._key_index",
                 "faust.stores.rocksdb:Store.offset_key",
                 "faust.stores.rocksdb:Store.revoke_partitions",
                 "faust.stores.rocksdb:Store.reset_state",
                 "faust.stores.base:SerializedStore._encode_key",
                 "faust.stores.base:SerializedStore._encode_value"),
        written_for=(FAUST, MODE), exact=True,
        upstream=f"{UNFILED}; no upstream issue found",
        mixins={Seam.TABLE: persisting.RecordsSent,
                Seam.STORE: persisting.InMemoryCommitted,
                Seam.CONSUMER: persisting.CommitMarked,
                Seam.TABLE_MANAGER: persisting.CommitPersists,
                Seam.RECOVERY: persisting.LocalStateChecked}),
    Change(
        id="FAUST-18", kind=Kind.SPEED,
        title="A commit passes one record of a partition written one transaction per record",
        invariant="Once every record a partition's consumer read is acknowledged, the "
                  "next commit's offset is the one after the last of them, whatever "
                  "commit markers lie between.",
        touches=("faust.transport.consumer:Consumer._add_gap",
                 "faust.transport.consumer:Consumer._drain_messages"),
        written_for=(FAUST, MODE), exact=True,
        upstream=f"{UNFILED}; no upstream issue found",
        mixins={Seam.CONSUMER: committing.GapEndsBeforeTheRecord}),
    Change(
        id="FAUST-19", kind=Kind.SPEED,
        title="Every gap a fetched record follows rebuilds the partition's gap tree",
        invariant="Noting a gap neither yields to the event loop nor builds an interval "
                  "tree: the gaps noted since the last commit join the acknowledged "
                  "offsets when a commit looks for its offset.",
        touches=("faust.transport.consumer:Consumer._add_gap",
                 "faust.transport.consumer:Consumer._new_offset",
                 "faust.transport.consumer:Consumer._acked",
                 "faust.transport.consumer:Consumer._committed_offset",
                 "faust.transport.consumer:Consumer.on_partitions_revoked"),
        written_for=(FAUST, MODE), exact=True,
        upstream=f"{UNFILED}; no upstream issue found",
        mixins={Seam.CONSUMER: committing.GapsNotedInBulk}),
    Change(
        id="AIOKAFKA-1", kind=Kind.BUG,
        title="A connection lost during FindCoordinator ends a transactional producer",
        invariant="A worker's Faust producer looks its coordinator up again after a "
                  "connection lost during the lookup (at most 10 times), as aiokafka "
                  "does for a node not ready; other producers keep aiokafka's behaviour.",
        touches=("faust.transport.drivers.aiokafka:Producer._producer_type",
                 "aiokafka.producer.producer:AIOKafkaProducer._sender",
                 "aiokafka.producer.sender:Sender._find_coordinator",
                 "aiokafka.producer.sender:Sender._retry_backoff"),
        written_for=(AIOKAFKA,), exact=False,
        upstream=f"{UNFILED}; related: aio-libs/aiokafka#1151 (closed: a coordinator "
                 "marked dead fails the transaction) and #1145 (open: transactions stuck "
                 "on a broker change)",
        mixins={Seam.PRODUCER: producing.CoordinatorRetryProducer}),
)

INTERNALS: tuple[str, ...] = tuple(dict.fromkeys(
    name for change in CHANGES for name in change.touches))
"""Every private name the changes touch, once each."""


def applicable(versions: Mapping[str, str], changes: Iterable[Change] = CHANGES
               ) -> tuple[tuple[Change, ...], tuple[Change, ...]]:
    """The changes applied with these distribution `versions`, and those left out:
    an ``exact`` change on a version it was not written for."""
    applied: list[Change] = []
    left_out: list[Change] = []
    for change in changes:
        (applied if not change.exact or change.written_for_versions(versions)
         else left_out).append(change)
    return tuple(applied), tuple(left_out)

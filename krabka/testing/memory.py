"""An in-process model of the Kafka rules the protocol relies on.

`MemoryBroker` is the cluster: a transaction coordinator that mints epochs,
and partitioned logs with transactions, stable offsets and compaction.
`MemoryTransport` is one client process on it, implementing the six
`Transport` protocols as `KafkaTransport` does on a real cluster. It exists
for unit tests and deterministic simulation; it never replaces an
integration test against a real broker.

Modelled on purpose, because the protocol's safety rests on them:
InitProducerId bumps the epoch and never reuses a value; at epoch 32766 the
next one moves to a new producer id with epoch 0, which may be numerically
smaller (per-broker id blocks); an InitProducerId that finds a transaction
open aborts it with one bump and then bumps again, as Kafka's
CONCURRENT_TRANSACTIONS retry does; a transaction open longer than its
timeout is aborted with a bump at the broker's next abort cleanup pass (a
transaction timed out at T is aborted at the first multiple of
`abort_cleanup_interval` at or after T; 0 aborts at once), and until then it
holds the stable offset; writes and commits under a superseded token
raise `FencedError`; read_committed reads stop at the last stable offset;
offsets are per partition, control markers take offsets, and compaction
keeps the offsets of the records it retains.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import Literal

from krabka.clock import Clock, SystemClock
from krabka.defaults import STATE_TOPIC, TERMS_TOPIC
from krabka.errors import FencedError, InvalidStateError, StateTopicError, TransportError
from krabka.format.partition import murmur2, to_positive
from krabka.format.records import role_of
from krabka.format.terms import term_role_of
from krabka.format.token import NO_EPOCH, FencingToken
from krabka.observe.status import LeadershipStatus
from krabka.rules.state import Record
from krabka.topic_policy import (
    KAFKA_TRANSACTION_MAX_TIMEOUT_MS,
    StateTopicPolicy,
    TopicCheck,
    TopicFacts,
)
from krabka.transport import PartitionRead, require_key_or_value, require_offset

__all__ = ["MAX_EPOCH", "MemoryBroker", "MemoryRecord", "MemoryTransport"]

MEMORY_SERVERS = "<in-memory broker>"
"""Where a `MemoryBroker` is, as the topic check's messages name it."""
MAX_EPOCH = 32766
"""The last epoch Kafka mints for a producer id before moving to a new id."""

TxnState = Literal["Ongoing", "CompleteCommit", "CompleteAbort"]


@dataclass(eq=False)
class _Transaction:
    role: str
    token: FencingToken
    started_ms: int
    timeout_ms: int
    state: TxnState = "Ongoing"
    partitions: set[tuple[str, int]] = field(default_factory=set)


@dataclass(eq=False)
class _Entry:
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    transaction: _Transaction | None
    control: bool = False
    headers: tuple[tuple[str, bytes], ...] = ()

    def committed(self) -> bool:
        if self.control:
            return False
        return self.transaction is None or self.transaction.state == "CompleteCommit"


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """One committed record of any topic, as a consumer sees it (`MemoryBroker.records`)."""

    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[tuple[str, bytes], ...]


class _Partition:
    def __init__(self) -> None:
        self.entries: list[_Entry] = []
        self.next_offset = 0
        self._waiters: list[asyncio.Future[None]] = []

    def append(self, entry_key: bytes | None, value: bytes | None, timestamp: int,
               transaction: _Transaction | None, control: bool = False,
               headers: tuple[tuple[str, bytes], ...] = ()) -> int:
        offset = self.next_offset
        self.entries.append(_Entry(offset, entry_key, value, timestamp, transaction, control,
                                   headers))
        self.next_offset += 1
        self.notify()
        return offset

    def last_stable_offset(self) -> int:
        for entry in self.entries:
            if entry.transaction is not None and entry.transaction.state == "Ongoing":
                return entry.offset
        return self.next_offset

    def read_committed(self, from_offset: int) -> PartitionRead:
        lso = self.last_stable_offset()
        records = [
            Record(e.offset, e.key or b"", e.value, e.timestamp)
            for e in self.entries
            if from_offset <= e.offset < lso and e.committed()
        ]
        return PartitionRead(records, lso, self.next_offset)

    async def changed(self) -> None:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        await waiter

    def notify(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


@dataclass(eq=False)
class _Topic:
    partitions: list[_Partition]
    compacted: bool
    replication: int
    min_insync_replicas: int
    segment_ms: int


@dataclass(eq=False)
class _TransactionalId:
    token: FencingToken
    timeout_ms: int
    open: _Transaction | None = None
    state: str = "Empty"


class MemoryBroker:
    """The cluster: topics, partitions and one transaction coordinator.

    `producer_ids` yields the ids handed out on first use and on epoch
    exhaustion (default 1000, 1001, ...); pass a decreasing sequence to model
    a coordinator that moved to a broker with a lower id block. `clock` times
    transaction timeouts.
    """

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        producer_ids: Iterator[int] | None = None,
        transaction_max_timeout: float = KAFKA_TRANSACTION_MAX_TIMEOUT_MS / 1000,
        abort_cleanup_interval: float = 0.0,
    ) -> None:
        self.clock: Clock = clock or SystemClock()
        self._producer_ids = producer_ids if producer_ids is not None else itertools.count(1000)
        self._used_ids: set[int] = set()
        self.transaction_max_timeout_ms = round(transaction_max_timeout * 1000)
        self.abort_cleanup_interval_ms = round(abort_cleanup_interval * 1000)
        self.topics: dict[str, _Topic] = {}
        self._ids: dict[str, _TransactionalId] = {}
        self.epochs_minted = 0

    def create_topic(
        self,
        name: str,
        partitions: int,
        *,
        compacted: bool = True,
        replication: int = 3,
        min_insync_replicas: int = 2,
        segment_ms: int = 60_000,
    ) -> None:
        """Create `name` with `partitions` empty partitions.

        The defaults are the settings `ensure_topics` gives a production
        state topic; the others are only reported to the topic check.
        """
        if name in self.topics:
            raise ValueError(f"topic {name!r} exists")
        self.topics[name] = _Topic([_Partition() for _ in range(partitions)], compacted,
                                   replication, min_insync_replicas, segment_ms)

    def topic_facts(self, name: str) -> TopicFacts:
        """What this cluster would tell an admin client of `name` and its brokers."""
        topic = self.topics.get(name)
        if topic is None:
            return TopicFacts(name, MEMORY_SERVERS, exists=False)
        return TopicFacts(
            name,
            MEMORY_SERVERS,
            exists=True,
            partitions=len(topic.partitions),
            cleanup_policy="compact" if topic.compacted else "delete",
            replication=topic.replication,
            min_insync_replicas=topic.min_insync_replicas,
            segment_ms=topic.segment_ms,
            transaction_max_timeout_ms=self.transaction_max_timeout_ms,
            abort_cleanup_interval_ms=self.abort_cleanup_interval_ms,
        )

    def add_partitions(self, name: str, count: int) -> None:
        """CreatePartitions: grow `name` by `count` empty partitions."""
        self.topics[name].partitions.extend(_Partition() for _ in range(count))

    def partition(self, topic: str, partition: int) -> _Partition:
        """The log of one partition.

        A missing topic or partition is a `TransportError`, as Kafka answers
        UNKNOWN_TOPIC_OR_PARTITION (a retriable error) to a request for it.
        """
        try:
            return self.topics[topic].partitions[partition]
        except (KeyError, IndexError):
            raise TransportError(
                f"no partition {topic}-{partition} (UNKNOWN_TOPIC_OR_PARTITION)") from None

    def partition_count(self, topic: str) -> int:
        """How many partitions `topic` has; a missing topic is a `TransportError`."""
        if topic not in self.topics:
            raise TransportError(f"no topic {topic!r} (UNKNOWN_TOPIC_OR_PARTITION)")
        return len(self.topics[topic].partitions)

    # The transaction coordinator.

    def init_producer_id(
        self, role: str, transaction_timeout: float, current: FencingToken | None = None
    ) -> FencingToken:
        """InitProducerId: mint the role's next token, fencing the previous one.

        A timeout that is not positive is a caller's bug (`ValueError`); one
        over ``transaction.max.timeout.ms`` is the broker's configuration
        (INVALID_TRANSACTION_TIMEOUT, a `StateTopicError`, as from
        `KafkaTransport`).
        """
        timeout_ms = round(transaction_timeout * 1000)
        if not timeout_ms > 0:
            raise ValueError(f"transaction_timeout must be positive, got {transaction_timeout}")
        if timeout_ms > self.transaction_max_timeout_ms:
            raise StateTopicError(
                f"InitProducerId for role {role!r}: the transaction timeout {timeout_ms} ms "
                f"exceeds transaction.max.timeout.ms ({self.transaction_max_timeout_ms} ms, "
                "INVALID_TRANSACTION_TIMEOUT): shorten the lease or raise "
                "transaction.max.timeout.ms on every broker"
            )
        self.expire_transactions()
        entry = self._ids.get(role)
        if entry is None:
            entry = _TransactionalId(FencingToken(self._new_producer_id(), 0), timeout_ms)
            self._ids[role] = entry
            self.epochs_minted += 1
            return entry.token
        if current is not None and current != entry.token:
            if entry.open is not None and current.producer_id == entry.token.producer_id:
                # As Kafka does: it checks only the producer id before aborting
                # the current epoch's ongoing transaction with a bump.
                self._finish(entry, "CompleteAbort")
                self._bump(entry)
            raise FencedError(f"{role}: {current} is not the current epoch {entry.token}")
        if entry.open is not None:
            self._finish(entry, "CompleteAbort")
            self._bump(entry)
        self._bump(entry)
        entry.timeout_ms = timeout_ms
        entry.state = "Empty"
        return entry.token

    def describe(self, role: str) -> LeadershipStatus:
        """DescribeTransactions: the role's current token and transaction state."""
        self.expire_transactions()
        entry = self._ids.get(role)
        if entry is None:
            return LeadershipStatus(role, NO_EPOCH, "Unknown")
        return LeadershipStatus(role, entry.token, entry.state)

    def expire_transactions(self) -> None:
        """Abort, with a bump, every transaction whose timeout passed before the
        latest abort cleanup pass."""
        now = self.clock.now_ms()
        interval = self.abort_cleanup_interval_ms
        for entry in self._ids.values():
            txn = entry.open
            if txn is None:
                continue
            expired_at = txn.started_ms + txn.timeout_ms + 1
            if interval:
                expired_at = -(-expired_at // interval) * interval  # the next cleanup pass
            if now >= expired_at:
                self._finish(entry, "CompleteAbort")
                self._bump(entry)

    def _new_producer_id(self) -> int:
        producer_id = next(self._producer_ids)
        if producer_id in self._used_ids:
            raise RuntimeError(f"producer id {producer_id} handed out twice")
        self._used_ids.add(producer_id)
        return producer_id

    def _bump(self, entry: _TransactionalId) -> None:
        if entry.token.producer_epoch >= MAX_EPOCH:
            entry.token = FencingToken(self._new_producer_id(), 0)
        else:
            entry.token = FencingToken(entry.token.producer_id, entry.token.producer_epoch + 1)
        self.epochs_minted += 1

    def _finish(self, entry: _TransactionalId, outcome: TxnState) -> None:
        txn = entry.open
        assert txn is not None
        txn.state = outcome
        entry.open = None
        entry.state = outcome
        for topic, index in sorted(txn.partitions):
            self.partition(topic, index).append(None, None, self.clock.now_ms(), txn, True)

    def _current(self, role: str, token: FencingToken) -> _TransactionalId:
        self.expire_transactions()
        entry = self._ids.get(role)
        if entry is None or entry.token != token:
            current = entry.token if entry else None
            raise FencedError(f"{role}: epoch {token} is superseded by {current}")
        return entry

    # Transactions, as the fenced producer sees them.

    def begin(self, role: str, token: FencingToken) -> _Transaction:
        """Open a transaction for `role` under `token`."""
        entry = self._current(role, token)
        if entry.open is not None:
            raise InvalidStateError(f"{role}: a transaction is already open")
        entry.open = _Transaction(role, token, self.clock.now_ms(), entry.timeout_ms)
        entry.state = "Ongoing"
        return entry.open

    def produce(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        transaction: _Transaction | None = None,
        headers: tuple[tuple[str, bytes], ...] = (),
    ) -> int:
        """Append one record; inside `transaction` only while its token is current."""
        log = self.partition(topic, partition)
        if transaction is not None:
            entry = self._current(transaction.role, transaction.token)
            if entry.open is not transaction:
                raise FencedError(f"{transaction.role}: the transaction was aborted")
            transaction.partitions.add((topic, partition))
        return log.append(key, value, timestamp, transaction, headers=headers)

    def records(self, topic: str, partition: int) -> list[MemoryRecord]:
        """What a read_committed consumer of `topic`'s `partition` reads, headers included."""
        log = self.partition(topic, partition)
        lso = log.last_stable_offset()
        return [MemoryRecord(e.offset, e.key, e.value, e.timestamp, e.headers)
                for e in log.entries if e.offset < lso and e.committed()]

    def end(self, transaction: _Transaction, commit: bool) -> None:
        """EndTxn: commit or abort `transaction`, writing control markers."""
        entry = self._current(transaction.role, transaction.token)
        if entry.open is not transaction:
            raise FencedError(f"{transaction.role}: the transaction was aborted")
        self._finish(entry, "CompleteCommit" if commit else "CompleteAbort")

    # Log maintenance, as the broker's cleaner does it.

    def compact(self, topic: str) -> None:
        """Compact every partition of `topic` below its stable offset.

        Keeps the latest record of each key with its offset, and removes
        tombstones, aborted records and control markers; offsets never move.
        """
        for log in self.topics[topic].partitions:
            lso = log.last_stable_offset()
            latest: dict[bytes | None, int] = {}
            for entry in log.entries:
                if entry.offset < lso and entry.committed():
                    latest[entry.key] = entry.offset
            log.entries = [
                e
                for e in log.entries
                if e.offset >= lso
                or (e.committed() and latest.get(e.key) == e.offset and e.value)
            ]


async def _round_trip() -> None:
    """Yield to the event loop, as a request to a real broker does.

    Other members run between a client's calls, so interleavings such as two
    InitProducerIds before either first lease write happen here too.
    """
    await asyncio.sleep(0)


class _MemoryTail:
    def __init__(self, log: _Partition, from_offset: int, role: str | None = None,
                 key_role: Callable[[bytes], str | None] = role_of) -> None:
        self._log = log
        self._position = from_offset
        self._role = role
        self._key_role = key_role
        self._seen: tuple[int, int] | None = None

    async def next(self) -> PartitionRead:
        while True:
            read = self._log.read_committed(self._position)
            marks = (read.last_stable_offset, read.high_watermark)
            records = read.records
            if self._role is not None:
                records = [r for r in records if self._key_role(r.key) in (self._role, None)]
                self._position = max(self._position, read.last_stable_offset)
                if records:
                    return PartitionRead(records, *marks)
            elif records or marks != self._seen:
                self._seen = marks
                self._position = max(self._position, read.last_stable_offset)
                return read
            await self._log.changed()

    def returned_to(self) -> int:
        return self._position

    async def close(self) -> None:
        return None


class _MemoryTransaction:
    def __init__(self, client: MemoryTransport, transaction: _Transaction) -> None:
        self._client = client
        self._txn = transaction
        self.finished = False

    async def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
    ) -> None:
        self._check_open()
        await _round_trip()
        broker = self._client.broker
        if partition is None:
            count = broker.partition_count(topic)
            partition = to_positive(murmur2(key)) % count if key else 0
        broker.produce(topic, partition, key, value, self._client.clock.now_ms(), self._txn)

    async def write_lease(self, partition: int, key: bytes, value: bytes | None) -> int:
        self._check_open()
        await _round_trip()
        return self._client.broker.produce(
            self._client.topic, partition, key, value, self._client.clock.now_ms(), self._txn
        )

    async def commit(self) -> None:
        self._check_open()
        self.finished = True
        try:
            await _round_trip()
        except asyncio.CancelledError:
            # Cancelled before it reached the broker: the transaction is still
            # open, and the producer's next transaction aborts it first.
            self._client._abandoned[self._txn.role] = self._txn
            raise
        self._client.broker.end(self._txn, commit=True)

    async def abort(self) -> None:
        """Abort; a no-op once the transaction ended, as on `KafkaTransport`."""
        if self.finished:
            return
        self.finished = True
        self._client.broker.end(self._txn, commit=False)

    def abandon(self) -> None:
        """Give the transaction up; it stays open until the producer's next
        transaction or conditional bump aborts it, or it times out."""
        if not self.finished:
            self.finished = True
            self._client._abandoned[self._txn.role] = self._txn

    def _check_open(self) -> None:
        if self.finished:
            raise InvalidStateError(f"{self._txn.role}: the transaction has already ended")


class MemoryTransport:
    """One client process on a `MemoryBroker`: all six `Transport` protocols.

    Like a `KafkaTransport`, it keeps the producer each acquired epoch binds,
    so two transports on one broker are two processes that can fence each
    other. Record timestamps come from this client's `clock`, as Kafka's
    CreateTime does, so a skewed clock here is a skewed member.
    """

    def __init__(
        self,
        broker: MemoryBroker | None = None,
        *,
        topic: str = STATE_TOPIC,
        terms_topic: str = TERMS_TOPIC,
        clock: Clock | None = None,
    ) -> None:
        self.broker = broker or MemoryBroker(clock=clock)
        self.topic = topic
        self.terms_topic = terms_topic
        self._terms_policy = StateTopicPolicy("terms topic")
        self.clock: Clock = clock or self.broker.clock
        self._producers: dict[str, FencingToken] = {}
        self._policy = StateTopicPolicy()
        self._abandoned: dict[str, _Transaction] = {}
        # Roles whose producer `prepare_epoch` got ready: nothing to connect
        # in memory, but what a candidate asked for is visible to its tests.
        self.prepared: set[str] = set()
        # The outputs each role's latest preparation was asked to read ahead.
        self.prepared_outputs: dict[str, tuple[str, ...]] = {}

    async def __aenter__(self) -> MemoryTransport:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._producers.clear()
        self._abandoned.clear()
        self.prepared.clear()

    async def acquire_epoch(
        self, role: str, transaction_timeout: float, current: FencingToken | None = None
    ) -> FencingToken:
        """InitProducerId on the broker's coordinator; keeps the producer it binds."""
        await _round_trip()
        holding = current is not None and self._producers.get(role) == current
        if holding:
            self._settle(role)  # as KafkaTransport settles the producer before the bump
        try:
            token = self.broker.init_producer_id(role, transaction_timeout, current)
        except FencedError:
            if holding:
                del self._producers[role]  # a fenced producer never writes again
            raise
        if current is None or holding:
            # A conditional bump moves the producer that held `current` to the
            # new epoch, as `KafkaTransport` does.
            self._producers[role] = token
        if current is None:
            self._abandoned.pop(role, None)  # a new producer; InitProducerId aborted it
            self.prepared.discard(role)  # as KafkaTransport takes the prepared producer
        try:
            await _round_trip()
        except asyncio.CancelledError:
            # As KafkaTransport stops a producer whose start was cancelled:
            # the epoch was minted, but nothing holds it.
            if current is None and self._producers.get(role) == token:
                del self._producers[role]
            raise
        return token

    async def prepare_epoch(self, role: str, transaction_timeout: float, partition: int,
                            outputs: Collection[str] = (), *, wait: bool = False) -> None:
        """Mints nothing; records that `role`'s producer was asked to get ready
        (at once, `wait` or not: there is nothing to connect in memory)."""
        if not transaction_timeout > 0:
            raise ValueError(f"transaction_timeout must be positive, got {transaction_timeout}")
        self.prepared.add(role)
        self.prepared_outputs[role] = tuple(outputs)

    async def discard_prepared(self, role: str) -> None:
        self.prepared.discard(role)

    async def describe_epoch(self, role: str) -> LeadershipStatus:
        """The coordinator's current token for `role`."""
        await _round_trip()
        return self.broker.describe(role)

    async def read_partition(self, partition: int, from_offset: int = 0) -> PartitionRead:
        """Committed records of the state topic's `partition` from `from_offset`
        to the stable offset."""
        require_offset(from_offset)
        await _round_trip()
        return self.broker.partition(self.topic, partition).read_committed(from_offset)

    async def tail(self, partition: int, from_offset: int, *,
                   role: str | None = None) -> _MemoryTail:
        """Follow the state topic's `partition` from `from_offset` (only `role`'s
        records, with `role`: `StateReader.tail`)."""
        return _MemoryTail(self.broker.partition(self.topic, partition), from_offset, role)

    async def topic_facts(self) -> TopicFacts:
        """What the broker says of the state topic and itself."""
        return self.broker.topic_facts(self.topic)

    async def check_topic(self, partitions: int, lease_duration: float | None) -> TopicCheck:
        """Refuse a state topic or broker the protocol cannot run on (`StateTopicError`)."""
        return self._policy.check(await self.topic_facts(), partitions, lease_duration)

    async def append(self, partition: int, key: bytes, value: bytes | None) -> int:
        """Write a registration record through the plain producer."""
        await _round_trip()
        return self.broker.produce(self.topic, partition, key, value, self.clock.now_ms())

    async def begin_transaction(self, role: str, token: FencingToken) -> _MemoryTransaction:
        """Open a transaction on `role`'s producer, which must hold `token`.

        A transaction of the producer that was abandoned is aborted first, as
        `KafkaTransport` settles it.
        """
        self._holding(role, token)
        self._settle(role)
        return _MemoryTransaction(self, self.broker.begin(role, token))

    async def release(self, role: str, token: FencingToken) -> None:
        """Forget `role`'s producer, as closing it does; it must hold `token`."""
        self._holding(role, token)
        del self._producers[role]
        # Closing a producer does not abort its transaction: the coordinator
        # does at its timeout, as on Kafka.
        self._abandoned.pop(role, None)

    def _settle(self, role: str) -> None:
        """Abort the role producer's abandoned transaction, if still open."""
        txn = self._abandoned.pop(role, None)
        if txn is not None and txn.state == "Ongoing":
            with contextlib.suppress(FencedError):  # the coordinator aborted it already
                self.broker.end(txn, commit=False)

    def _holding(self, role: str, token: FencingToken) -> None:
        held = self._producers.get(role)
        if held != token:
            raise FencedError(f"{role}: this client's producer holds {held}, not {token}")

    # Term mode: the terms topic and the leader's outputs, written without
    # transactions.

    async def append_term(self, partition: int, key: bytes, value: bytes | None) -> int:
        """Write one record to the terms topic at `partition`; return its offset."""
        await _round_trip()
        return self.broker.produce(self.terms_topic, partition, key, value, self.clock.now_ms())

    async def read_terms(self, partition: int) -> PartitionRead:
        """Every record of the terms topic's `partition`, to its end."""
        await _round_trip()
        return self.broker.partition(self.terms_topic, partition).read_committed(0)

    async def tail_terms(self, partition: int, from_offset: int, *,
                         role: str | None = None) -> _MemoryTail:
        """Follow the terms topic's `partition` from `from_offset` (only `role`'s
        records, with `role`)."""
        return _MemoryTail(self.broker.partition(self.terms_topic, partition), from_offset,
                           role, term_role_of)

    async def check_terms_topic(self, partitions: int) -> TopicCheck:
        """Refuse a terms topic term mode cannot run on (`StateTopicError`)."""
        facts = self.broker.topic_facts(self.terms_topic)
        return self._terms_policy.check(facts, partitions, None)

    async def output_partitions(self, topic: str) -> int:
        """How many partitions `topic` has; a missing topic is a `TransportError`."""
        await _round_trip()
        return self.broker.partition_count(topic)

    async def output_facts(self, topic: str) -> TopicFacts:
        """What the broker says of `topic` (``exists=False`` if it does not exist)."""
        await _round_trip()
        return self.broker.topic_facts(topic)

    async def write_output(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]],
    ) -> int:
        """Write one record to `topic`'s `partition` outside any transaction."""
        require_key_or_value(key, value)
        await _round_trip()
        return self.broker.produce(topic, partition, key, value, self.clock.now_ms(),
                                   headers=tuple(headers))

"""`KafkaTransport`: the six transport protocols on a real Kafka cluster.

What it relies on of Kafka (docs/design.md#the-safety-argument and
docs/design.md#the-kafka-adapter; each is proven by the ``[kafka]`` half of
``tests/kafka/test_transport_contract.py`` on Kafka 4.4.0):

* **InitProducerId mints the leadership epoch.** Starting an aiokafka producer
  with ``transactional.id = role`` sends it; the coordinator bumps the role's
  epoch, persists it in ``__transaction_state`` and fences the previous
  producer. `acquire_epoch` keeps that producer, and every lease record and
  guarded write goes through it, so the broker rejects a deposed leader's
  writes (47 INVALID_PRODUCER_EPOCH on Produce, AddPartitionsToTxn and EndTxn;
  90 PRODUCER_FENCED on newer InitProducerId versions).
* **Commits do not move the epoch.** aiokafka sends EndTxn v0, which keeps
  transaction-protocol-v1 semantics even on a cluster whose finalized
  ``transaction.version`` is 2 (only EndTxn v5+ bumps per commit), so the token
  stays constant for a tenure.
* **A transaction open longer than its timeout is aborted with a bump**: a
  leader that holds one too long is fenced (guarded transactions must be short).
* **read_committed stops at the last stable offset** and hides aborted records;
  each Fetch response reports the stable offset and the high watermark, which
  is how `read_partition` and `tail` see an open transaction.
* **The conditional InitProducerId (KIP-360, v3+)** bumps only while the
  caller's pair is current and answers 90 (47 on v3) otherwise; `resign()`
  uses it so a resignation never fences a successor.
* **DescribeTransactions (API 65)** reports a transactional id's current pair;
  105 TRANSACTIONAL_ID_NOT_FOUND means no member ever took the role (or its id
  expired after ``transactional.id.expiration.ms``).

aiokafka 0.14 defines only InitProducerId v0, has no DescribeTransactions at
all, negotiates ApiVersions v0 (no finalized features) and maps codes 90 and
105 to ``UnknownError``, which would hide a fence. The missing requests and
error classes are therefore hand-written with aiokafka's own protocol classes
in `krabka.kafka.protocol.messages`.

Term mode (docs/term-mode.md) needs none of the transaction machinery:
`append_term` and `write_output` go through the plain idempotent producer of
the registrations, and `read_terms`, `tail_terms` and `check_terms_topic` are
the state topic's reads and check applied to the terms topic. Nothing on
those paths creates a transactional producer or sends InitProducerId with a
transactional id, so no TransactionalId ACL is needed and
DescribeTransactions for a role used only in term mode answers 105. (The
idempotent producer's own InitProducerId carries a null transactional id: it
mints a producer id for sequence numbers, no role's epoch.)

Clients, all created lazily and closed by `close()` (bounded, also on errors):
one transactional producer per acquired role (`krabka.kafka.producer.fenced`), one
plain idempotent producer for registrations, term records and term-mode
outputs, one read_committed consumer for `read_partition` and `read_terms`
(`krabka.kafka.consumer.reader`), one shared by every tail of either topic
(`krabka.kafka.consumer.tail`), an admin client for the topic checks and output
metadata (`krabka.kafka.admin`) and a raw client for the coordinator
requests (`krabka.kafka.producer.coordinators`). Every network wait is bounded:
by `operation_timeout` for reads, plain writes, checks and coordinator
requests, and by the role's transaction timeout for the fenced producer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Collection
from types import TracebackType
from typing import TYPE_CHECKING, Any

from aiokafka import (  # type: ignore[import-untyped, unused-ignore]
    AIOKafkaConsumer,
    AIOKafkaProducer,
)
from aiokafka import errors as _errors  # type: ignore[import-untyped, unused-ignore]

from krabka.defaults import STATE_TOPIC, TERMS_TOPIC
from krabka.errors import FencedError, InvalidStateError, StateTopicError
from krabka.format.terms import term_role_of
from krabka.format.token import NO_EPOCH, FencingToken
from krabka.kafka.admin import TopicChecker
from krabka.kafka.aiokafka_internals import consumer_network_client, sender_task
from krabka.kafka.consumer.reader import PartitionReader
from krabka.kafka.consumer.tail import KafkaTail, TailHub
from krabka.kafka.errors import KafkaTransportError, KafkaUnavailableError
from krabka.kafka.lifecycle import (
    guard_bootstrap,
    servers_text,
    start_bounded,
    stop_consumer,
    stop_producer,
)
from krabka.kafka.options import ClientOptions
from krabka.kafka.producer.coordinators import TransactionCoordinators
from krabka.kafka.producer.fenced import KafkaGuardedTransaction, RoleProducer, again_after
from krabka.kafka.producer.one_connection import one_connection_per_broker
from krabka.kafka.producer.prepared import PreparedProducers, start_prepared
from krabka.kafka.producer.prompt_retry import make_prompt
from krabka.kafka.producer.seeded import Seed
from krabka.kafka.protocol.messages import (
    FENCE_ERROR_CODES,
    INVALID_TRANSACTION_TIMEOUT,
    NO_ERROR,
    TRANSACTIONAL_ID_NOT_FOUND,
    BrokerApiVersions,
    register_error_codes,
)
from krabka.observe.status import LeadershipStatus
from krabka.runtime.cancellation import bounded
from krabka.topic_policy import StateTopicPolicy, TopicFacts, require_topic
from krabka.transport import (
    PartitionRead,
    TopicCheck,
    require_key_or_value,
    require_offset,
)

if TYPE_CHECKING:
    from krabka.transport import Transport

__all__ = ["KafkaTransport"]

ROLE_PRODUCER_DEFAULTS = {
    # Right after a transaction ends the coordinator briefly answers
    # CONCURRENT_TRANSACTIONS; aiokafka's default 100 ms backoff then dominates a
    # handover (bench/profile.py measured p50 80 -> 56 ms with 20 ms).
    "retry_backoff_ms": 20,
}

CONSUMER_DEFAULTS = {
    # aiokafka's fetch routine, when a pass sends no Fetch, sleeps this long
    # unless something wakes it. As far as aiokafka's code tells, a pass can
    # find its node still "in flight" when asyncio.wait returned the finished
    # fetch task before that task's own done-callback cleared the node, and
    # nothing then wakes the routine (not reproduced on demand). A
    # standby's tail once sat 200 ms (the default) after an empty long poll,
    # and its takeover came 200 ms late (docs/benchmarks.md). A short wait
    # bounds that; it only runs when no fetch is in flight.
    "consumer_timeout_ms": 10,
}

log = logging.getLogger("krabka.kafka")


class KafkaTransport:
    """All six transport protocols (`krabka.transport.Transport`) on a Kafka cluster.

    ``async with KafkaTransport("127.0.0.1:9092") as transport: ...``

    `aiokafka_options` (``security_protocol``, ``ssl_context``, ``sasl_*``,
    ``client_id``, ``request_timeout_ms``, ...) reach every client the
    transport creates, each getting the ones its class accepts; options the
    protocol fixes (``acks``, ``isolation_level``, ``transactional_id``, ...)
    are refused. `operation_timeout` bounds every network wait that is not a
    fenced producer's (those are bounded by the role's transaction timeout);
    an unreachable cluster is a `KafkaUnavailableError` within it.
    `tail_wait_ms` is the tails' fetch long-poll: committed records arrive at
    once, a move of the high watermark alone within that time. `topic` is
    the state topic and `terms_topic` term mode's. `prepared_producers`
    bounds how many roles' producers `prepare_epoch` keeps connected ahead
    of a challenge (`krabka.kafka.producer.prepared`; 0 turns it off).
    """

    def __init__(
        self,
        bootstrap_servers: str | list[str],
        *,
        topic: str = STATE_TOPIC,
        terms_topic: str = TERMS_TOPIC,
        operation_timeout: float = 15.0,
        tail_wait_ms: int = 200,
        check_cache_seconds: float = 30.0,
        prepared_producers: int = 16,
        **aiokafka_options: Any,
    ) -> None:
        if not operation_timeout > 0:
            raise ValueError(f"operation_timeout must be positive, got {operation_timeout}")
        # The first use of aiokafka by this transport: from here on its error
        # table knows the codes a fence or a DescribeTransactions answers.
        register_error_codes()
        self.topic = topic
        self.terms_topic = terms_topic
        self.servers = servers_text(bootstrap_servers)
        self._options = ClientOptions(bootstrap_servers, aiokafka_options)
        self._timeout = operation_timeout
        self._checker = TopicChecker(self._options, timeout=operation_timeout,
                                     servers=self.servers, cache_seconds=check_cache_seconds)
        self._policy = StateTopicPolicy()
        self._terms_policy = StateTopicPolicy("terms topic")
        self._coordinators = TransactionCoordinators(self._options, timeout=operation_timeout,
                                                     servers=self.servers)
        self._reader = PartitionReader(lambda: self._new_consumer(0), timeout=operation_timeout)
        self._hub = TailHub(lambda: self._new_consumer(tail_wait_ms))
        self._producers: dict[str, RoleProducer] = {}
        self._prepared = PreparedProducers(self._role_producer, topic=topic, exists=self._exists,
                                           limit=prepared_producers, timeout=operation_timeout,
                                           seed=self._seed)
        # role -> (token, error) of its producer that retired itself (fenced, fatal)
        self._ended: dict[str, tuple[FencingToken, BaseException]] = {}
        self._role_locks: dict[str, asyncio.Lock] = {}
        self._plain: Any = None
        self._plain_lock = asyncio.Lock()
        # Topics known to exist: no client touches a topic before it is in here
        # (aiokafka's metadata requests would auto-create it).
        self._existing: set[str] = set()
        self._closed = False

    # Lifecycle.

    async def __aenter__(self) -> KafkaTransport:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Nothing to do up front: every client starts when first needed."""
        self._check_open()

    async def close(self) -> None:
        """Close every client this transport opened (bounded); idempotent."""
        if self._closed:
            return
        self._closed = True
        producers = list(self._producers.values())
        self._producers.clear()
        plain, self._plain = self._plain, None
        closing = [self._hub.close(), self._reader.close(), self._checker.close(),
                   self._coordinators.close(), self._prepared.close(),
                   *(p.close() for p in producers)]
        if plain is not None:
            closing.append(stop_producer(plain))
        for result in await asyncio.gather(*closing, return_exceptions=True):
            if isinstance(result, BaseException):
                log.warning("closing the Kafka transport: %r", result)

    # Coordinator.

    async def acquire_epoch(
        self, role: str, transaction_timeout: float, current: FencingToken | None = None
    ) -> FencingToken:
        """InitProducerId for ``transactional.id = role``.

        Without `current`: starts the role's transactional producer (closing
        any previous one of this transport), keeps it for the role's
        transactions, and returns the token it was minted. With
        `current`: the conditional bump (KIP-360) over the raw client; it
        returns the new token and raises `FencedError` if `current` was no
        longer the role's token. A producer of this transport that held
        `current` writes under the new token afterwards. A producer that
        `prepare_epoch` connected for the role is used if it is ready.
        """
        self._check_open()
        timeout_ms = _timeout_ms(transaction_timeout)
        async with self._lock(role):
            if current is not None:
                return await self._conditional_bump(role, timeout_ms, current)
            await self._drop(role)
            producer = self._prepared.take(role, timeout_ms)
            if producer is None:
                producer = self._role_producer(role, timeout_ms)
                start: Awaitable[None] = producer.start()
            else:
                start = start_prepared(producer)
            try:
                await start_bounded(start, self._timeout,
                                    f"InitProducerId for role {role!r}", self.servers)
            except BaseException as exc:
                await stop_producer(producer)
                if isinstance(exc, _errors.InvalidTransactionTimeout):
                    raise StateTopicError(
                        f"InitProducerId for role {role!r}: the transaction timeout "
                        f"{timeout_ms} ms exceeds the brokers' transaction.max.timeout.ms: "
                        "shorten the lease or raise transaction.max.timeout.ms on every broker"
                    ) from exc
                if isinstance(exc, _errors.KafkaError):
                    raise KafkaTransportError(
                        f"InitProducerId for role {role!r} failed: {exc!r}") from exc
                raise
            owner = RoleProducer(role, producer, self.topic, transaction_timeout,
                                 self._retired)
            self._producers[role] = owner
            self._ended.pop(role, None)
            # The tenure's end (a resignation's describe and conditional bump)
            # goes to the coordinator over the raw client: find it now.
            self._coordinators.warm(role)
            log.debug("%s: acquired %s", role, owner.token)
            return owner.token

    async def prepare_epoch(self, role: str, transaction_timeout: float, partition: int,
                            outputs: Collection[str] = (), *, wait: bool = False) -> None:
        """Connect `role`'s producer now so that a later `acquire_epoch` waits only
        for InitProducerId, and read `outputs`' metadata so that the first
        guarded write to them waits for none (`krabka.kafka.producer.prepared`);
        mints nothing.

        Returns at once: the preparation runs in the background and is
        dropped, at no cost to the challenge, if it fails or is not ready.
        With `wait`, returns once it has ended, and it is pinned (outside
        the transport's limit of prepared producers) until taken or discarded.
        """
        self._check_open()
        timeout_ms = _timeout_ms(transaction_timeout)
        await self._require(self.topic, "state topic")  # the preparation reads its metadata
        self._prepared.prepare(role, timeout_ms, partition, tuple(outputs), pinned=wait)
        # The tenure's resignation asks the coordinator over the raw client.
        self._coordinators.warm(role)
        if wait:
            await self._prepared.ready(role)

    async def discard_prepared(self, role: str) -> None:
        """Close the producer `prepare_epoch` connected for `role`, if any."""
        self._prepared.discard(role)

    async def describe_epoch(self, role: str) -> LeadershipStatus:
        """DescribeTransactions for `role` at its transaction coordinator."""
        self._check_open()
        entry = await self._coordinators.describe(role)
        if entry.error_code == TRANSACTIONAL_ID_NOT_FOUND:
            return LeadershipStatus(role, NO_EPOCH, "Unknown")
        if entry.error_code != NO_ERROR:
            raise KafkaTransportError(
                f"DescribeTransactions for role {role!r} answered "
                f"{_errors.for_code(entry.error_code).__name__} ({entry.error_code})"
            )
        token = FencingToken(entry.producer_id, entry.producer_epoch)
        return LeadershipStatus(role, token, entry.state)

    async def api_versions(self) -> BrokerApiVersions:
        """One broker's ApiVersions v3+ answer, with the finalized feature levels."""
        self._check_open()
        return await self._coordinators.api_versions()

    # StateReader.

    async def read_partition(self, partition: int, from_offset: int = 0) -> PartitionRead:
        """Committed records of `partition` from `from_offset` to the stable offset."""
        require_offset(from_offset)
        self._check_open()
        await self._require(self.topic, "state topic")
        return await self._reader.read(self.topic, partition, from_offset)

    async def tail(self, partition: int, from_offset: int, *,
                   role: str | None = None) -> KafkaTail:
        """Follow `partition` from `from_offset` (all tails share one consumer;
        only `role`'s records, with `role`: `StateReader.tail`)."""
        self._check_open()
        await self._require(self.topic, "state topic")
        return await self._hub.follow(self.topic, partition, from_offset, role)

    @property
    def client_options(self) -> ClientOptions:
        """The validated aiokafka options every client of this transport is built with
        (`krabka.kafka.topics.ensure_topics` builds its admin client from them)."""
        return self._options

    async def topic_facts(self) -> TopicFacts:
        """What the cluster says of the state topic and its brokers (cached)."""
        self._check_open()
        return await self._checker.facts(self.topic)

    async def check_topic(self, partitions: int, lease_duration: float | None) -> TopicCheck:
        """Refuse a state topic or broker the protocol cannot run on (`StateTopicError`)."""
        check = self._policy.check(await self.topic_facts(), partitions, lease_duration)
        self._existing.add(self.topic)
        return check

    # Registrar.

    async def append(self, partition: int, key: bytes, value: bytes | None) -> int:
        """Write one record through the plain idempotent producer; return its offset."""
        self._check_open()
        await self._require(self.topic, "state topic")
        return await self._send_plain(self.topic, partition, key, value)

    # LeaseWriter.

    async def begin_transaction(self, role: str, token: FencingToken) -> KafkaGuardedTransaction:
        """Open a transaction on `role`'s fenced producer, which must hold `token`."""
        self._check_open()
        owner = self._owner(role, token)
        await self._require(self.topic, "state topic")
        return await owner.begin()

    async def release(self, role: str, token: FencingToken) -> None:
        """Close `role`'s producer (bounded), which must hold `token`."""
        async with self._lock(role):
            owner = self._producers.get(role)
            if owner is None or owner.token != token:
                ended = self._ended.get(role)
                if owner is None and ended is not None and ended[0] == token:
                    self._ended.pop(role, None)
                    return  # already retired and closed
                raise FencedError(f"{role}: this transport's producer holds "
                                  f"{None if owner is None else owner.token}, not {token}")
            self._ended.pop(role, None)
            await self._drop(role)

    # TermLog: the state topic's reads, check and plain producer, on the terms topic.

    async def append_term(self, partition: int, key: bytes, value: bytes | None) -> int:
        """Write one term record through the plain idempotent producer; return its offset."""
        self._check_open()
        await self._require(self.terms_topic, "terms topic")
        return await self._send_plain(self.terms_topic, partition, key, value)

    async def read_terms(self, partition: int) -> PartitionRead:
        """Every record of the terms topic's `partition`, to its end.

        The reader of `read_partition`: nothing on the terms topic is
        transactional, so its stable offset is its high watermark.
        """
        self._check_open()
        await self._require(self.terms_topic, "terms topic")
        return await self._reader.read(self.terms_topic, partition)

    async def tail_terms(self, partition: int, from_offset: int, *,
                         role: str | None = None) -> KafkaTail:
        """Follow the terms topic's `partition` from `from_offset` (the tails'
        consumer; only `role`'s records, with `role`)."""
        self._check_open()
        await self._require(self.terms_topic, "terms topic")
        return await self._hub.follow(self.terms_topic, partition, from_offset, role,
                                      term_role_of)

    async def check_terms_topic(self, partitions: int) -> TopicCheck:
        """Refuse a terms topic term mode cannot run on (`StateTopicError`).

        The state topic's policy without the lease checks: nothing on the
        terms topic is transactional.
        """
        self._check_open()
        check = self._terms_policy.check(await self._checker.facts(self.terms_topic),
                                         partitions, None)
        self._existing.add(self.terms_topic)
        return check

    # OutputWriter.

    async def output_partitions(self, topic: str) -> int:
        """How many partitions `topic` has now; a missing topic is a `KafkaTransportError`."""
        self._check_open()
        count = await self._checker.partition_count(topic)
        if count is None:
            raise KafkaTransportError(
                f"no topic {topic!r} on {self.servers} (UNKNOWN_TOPIC_OR_PARTITION): "
                "create an output topic before a leader declares it")
        self._existing.add(topic)
        return count

    async def output_facts(self, topic: str) -> TopicFacts:
        """What the cluster says of `topic` (DescribeConfigs; cached like the topic checks)."""
        self._check_open()
        return await self._checker.facts(topic)

    async def write_output(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]],
    ) -> int:
        """Write one record to `topic`'s `partition` through the plain idempotent producer.

        Outside any transaction: acknowledged means written, whatever happens
        to the leader afterwards. Returns the record's offset.
        """
        self._check_open()
        require_key_or_value(key, value)
        if topic not in self._existing:
            await self.output_partitions(topic)
        return await self._send_plain(topic, partition, key, value, headers)

    # Internals.

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidStateError("the KafkaTransport is closed")

    def _role_producer(self, role: str, timeout_ms: int) -> Any:
        """A role's transactional producer, not started."""
        producer = AIOKafkaProducer(**self._options.producer(
            ROLE_PRODUCER_DEFAULTS,
            transactional_id=role, transaction_timeout_ms=timeout_ms, acks="all",
            enable_idempotence=True,
        ))
        make_prompt(producer)
        guard_bootstrap(producer.client)
        one_connection_per_broker(producer.client)
        return producer

    async def _seed(self, role: str) -> Seed:
        """What a role producer's client starts from instead of a bootstrap of its own."""
        metadata = await self._coordinators.topic_metadata(self.topic)
        coordinator = await self._coordinators.coordinator(role)
        return Seed(metadata, frozenset({self.topic}), coordinator)

    def _lock(self, role: str) -> asyncio.Lock:
        return self._role_locks.setdefault(role, asyncio.Lock())

    def _owner(self, role: str, token: FencingToken) -> RoleProducer:
        owner = self._producers.get(role)
        if owner is not None and owner.token == token:
            return owner
        ended = self._ended.get(role)
        if owner is None and ended is not None and ended[0] == token:
            raise again_after(ended[1])
        raise FencedError(f"{role}: this transport's producer holds "
                          f"{None if owner is None else owner.token}, not {token}")

    def _retired(self, owner: RoleProducer, error: BaseException) -> None:
        if self._producers.get(owner.role) is owner:
            del self._producers[owner.role]
            self._ended[owner.role] = (owner.token, error)

    async def _drop(self, role: str) -> None:
        owner = self._producers.pop(role, None)
        if owner is not None:
            await owner.close()

    async def _conditional_bump(
        self, role: str, timeout_ms: int, current: FencingToken
    ) -> FencingToken:
        owner = self._producers.get(role)
        holder = owner if owner is not None and owner.token == current else None
        if holder is not None:
            # An open transaction of its own would make the coordinator abort it
            # with a bump of its own, and this bump would then be refused.
            await holder.settle()
        result = await self._coordinators.init_producer_id(
            role, timeout_ms, current.producer_id, current.producer_epoch
        )
        if result.error_code == INVALID_TRANSACTION_TIMEOUT:
            raise StateTopicError(
                f"conditional InitProducerId for role {role!r}: the transaction timeout "
                f"{timeout_ms} ms exceeds the brokers' transaction.max.timeout.ms: "
                "shorten the lease or raise transaction.max.timeout.ms on every broker"
            )
        if result.error_code not in FENCE_ERROR_CODES and result.error_code != NO_ERROR:
            raise KafkaTransportError(
                f"conditional InitProducerId for role {role!r} answered "
                f"{_errors.for_code(result.error_code).__name__} ({result.error_code})"
            )
        if result.error_code in FENCE_ERROR_CODES:
            # `current` is no longer the role's token: a producer holding it is fenced.
            if holder is not None:
                await holder.retire(FencedError(f"{role}: {current} was superseded"),
                                    level=logging.INFO)
            raise FencedError(f"{role}: {current} is not the current epoch "
                              f"(InitProducerId answered {result.error_code})")
        bumped = FencingToken(result.producer_id, result.producer_epoch)
        if holder is not None:
            holder.rebind(bumped)
        return bumped

    async def _exists(self, topic: str) -> bool:
        """Whether `topic` exists, asked without creating it (remembered once it does)."""
        if topic not in self._existing:
            if not (await self._checker.facts(topic)).exists:
                return False
            self._existing.add(topic)
        return True

    async def _require(self, topic: str, label: str) -> None:
        """`topic` exists (asked once per transport): no client may auto-create it.

        A missing one is the `StateTopicError` naming how to create it.
        """
        if not await self._exists(topic):
            # A missing topic's facts are not cached: asked again for the error.
            require_topic(await self._checker.facts(topic), label)

    async def _send_plain(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> int:
        """One record through the plain idempotent producer, at `partition`; its offset."""
        producer = await self._plain_producer()

        async def send() -> Any:
            # aiokafka asserts the partition is in its metadata; a partition
            # the topic does not have is the broker's UNKNOWN_TOPIC_OR_PARTITION.
            if partition not in await producer.partitions_for(topic):
                raise KafkaTransportError(
                    f"no partition {topic}-{partition} (UNKNOWN_TOPIC_OR_PARTITION)")
            delivery = await producer.send(topic, value, key=key, partition=partition,
                                           headers=headers)
            return await asyncio.shield(delivery)

        try:
            metadata = await bounded(send(), self._timeout)
        except TimeoutError as exc:
            raise KafkaUnavailableError(
                f"appending to {topic}-{partition}: no acknowledgement within "
                f"{self._timeout:g} s (cluster {self.servers})"
            ) from exc
        except _errors.KafkaError as exc:
            raise KafkaTransportError(
                f"appending to {topic}-{partition} failed: {exc!r}") from exc
        return int(metadata.offset)

    async def _new_consumer(self, fetch_max_wait_ms: int) -> Any:
        consumer = AIOKafkaConsumer(**self._options.consumer(
            CONSUMER_DEFAULTS,
            group_id=None, isolation_level="read_committed", enable_auto_commit=False,
            auto_offset_reset="earliest", fetch_max_wait_ms=fetch_max_wait_ms,
        ))
        guard_bootstrap(consumer_network_client(consumer))
        try:
            await start_bounded(consumer.start(), self._timeout,
                                "starting a read_committed consumer", self.servers)
        except BaseException:
            await stop_consumer(consumer)
            raise
        return consumer

    async def _plain_producer(self) -> Any:
        async with self._plain_lock:
            plain = self._plain
            task = sender_task(plain) if plain is not None else None
            if task is not None and task.done():
                # Its sender died (a fatal error): queued records would wait forever.
                log.warning("the plain producer failed; starting a new one")
                self._plain = None
                await stop_producer(plain)
            if self._plain is None:
                # No transactional_id: this producer never mints a role's epoch,
                # which is what term mode relies on.
                producer = AIOKafkaProducer(**self._options.producer(
                    acks="all", enable_idempotence=True))
                guard_bootstrap(producer.client)
                try:
                    await start_bounded(producer.start(), self._timeout,
                                        "starting the plain producer", self.servers)
                except BaseException:
                    await stop_producer(producer)
                    raise
                self._plain = producer
            return self._plain


def _timeout_ms(transaction_timeout: float) -> int:
    timeout_ms = round(transaction_timeout * 1000)
    if not timeout_ms > 0:
        raise ValueError(f"transaction_timeout must be positive, got {transaction_timeout}")
    return timeout_ms


if TYPE_CHECKING:
    def _implements_transport(transport: KafkaTransport) -> Transport:
        """A static check only: mypy refuses it if `KafkaTransport` lacks a method."""
        return transport

"""Every use the Kafka adapter makes of aiokafka beyond its public API, in one file.

aiokafka's public API cannot do some of what the adapter needs: close a
client by hand when a bounded ``stop()`` did not finish, drive a role
producer's transaction manager and read its fatal cause, move it to an epoch
bumped elsewhere, start its network client apart from its sender and from
what the transport's own client knows, retry CONCURRENT_TRANSACTIONS sooner,
write a lease record and commit it in requests of its own, send the
coordination group's requests over the default connection, read a
consumer's position without awaiting and wake on its Fetch responses, send
requests aiokafka does not define, and know broker codes 90 and 105. Each
read or write of aiokafka's internals is a small function (or class) here,
and no other module of the library touches one: a unit test scans them.

Each function declares, with `_uses`, the group of internals it belongs to
and the names it reads or writes (``"module:Object.attribute"``, or
``"module:name"`` for a module attribute). `INTERNALS` is derived from those
declarations; a unit test checks that each name still exists in the
installed aiokafka, so an upgrade that renames one fails ``make unit``
instead of a tenure in production. `GROUPS` keeps them by group: each group
is one hook aiokafka could offer instead
(docs/decisions/0102-owned-client-or-upstream-hooks.md).

`AIOKAFKA` is the range the suite runs against; the package refuses another
version at import, before aiokafka's private modules are imported below.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from io import BytesIO
from typing import Any, TypeVar

import aiokafka  # type: ignore[import-untyped, unused-ignore]

from krabka.runtime.versions import DependencyRange

AIOKAFKA = DependencyRange(
    distribution="aiokafka",
    # The lowest version the suite has passed on, up to the next minor release:
    # aiokafka is 0.x, and its minor releases change the internals used below.
    # CI installs the newest release in the range, so each run tests that one.
    specifier=">=0.14.0,<0.15",
    override="COORDINATION_ALLOW_UNTESTED_AIOKAFKA",
)

AIOKAFKA.require(aiokafka.__version__)

# aiokafka ships annotations but no py.typed marker: see krabka.kafka.protocol.messages.
from aiokafka import errors as _errors  # type: ignore[import-untyped, unused-ignore]  # noqa: E402
from aiokafka.client import (  # type: ignore[import-untyped, unused-ignore]  # noqa: E402
    ConnectionGroup,
    CoordinationType,
)
from aiokafka.producer import sender as _sender  # type: ignore[import-untyped, unused-ignore]  # noqa: E402
from aiokafka.producer import (  # type: ignore[import-untyped, unused-ignore]  # noqa: E402
    transaction_manager as _transaction_manager,
)
from aiokafka.protocol.api import (  # type: ignore[import-untyped, unused-ignore]  # noqa: E402
    Request,
    RequestStruct,
    Response,
    ResponseHeader_v0,
)
from aiokafka.protocol.types import Schema  # type: ignore[import-untyped, unused-ignore]  # noqa: E402
from aiokafka.record.default_records import (  # type: ignore[import-untyped, unused-ignore]  # noqa: E402
    DefaultRecordBatchBuilder,
)

__all__ = [
    "AIOKAFKA",
    "GROUPS",
    "INTERNALS",
    "FlexibleRequestStruct",
    "OwnRequest",
    "RawRequest",
    "TransactionState",
    "V0ResponseHeader",
    "add_transaction_partition",
    "admin_network_client",
    "admin_send",
    "begin_transaction",
    "close_consumer_by_hand",
    "close_producer_by_hand",
    "complete_committed_transaction",
    "consumer_network_client",
    "default_connection_group",
    "extend_error_table",
    "fatal_cause",
    "fetch_position",
    "fetch_task",
    "find_transaction_coordinator",
    "increment_sequence_number",
    "is_fatal",
    "lease_record_batch",
    "mark_transaction_coordinator_dead",
    "move_to_epoch",
    "on_fetch_response",
    "override_transaction_backoffs",
    "pending_fetch_tasks",
    "producer_identity",
    "retry_backoff",
    "seed_client",
    "sender_task",
    "sequence_number",
    "start_sender",
    "transaction_coordinator",
    "transaction_state",
    "transactional_id",
    "undelivered_futures",
    "wait_for_transaction_end",
]

_T = TypeVar("_T")

_GROUPS: dict[str, list[str]] = {}


def _uses(group: str, *names: str) -> Callable[[_T], _T]:
    """Declare that what follows reads or writes `names`, aiokafka internals of `group`."""
    listed = _GROUPS.setdefault(group, [])
    listed.extend(name for name in names if name not in listed)

    def declared(thing: _T) -> _T:
        return thing

    return declared


_PRODUCER = "aiokafka.producer.producer:AIOKafkaProducer"
_SENDER = "aiokafka.producer.sender:Sender"
_MANAGER = "aiokafka.producer.transaction_manager:TransactionManager"
_ACCUMULATOR = "aiokafka.producer.message_accumulator:MessageAccumulator"
_CLIENT = "aiokafka.client:AIOKafkaClient"
_CONSUMER = "aiokafka.consumer.consumer:AIOKafkaConsumer"
_FETCHER = "aiokafka.consumer.fetcher:Fetcher"
_ADMIN = "aiokafka.admin.client:AIOKafkaAdminClient"


# ------------------------------------------------- closing a client by hand

@_uses("closing by hand", f"{_PRODUCER}._closed", f"{_PRODUCER}._message_accumulator",
       f"{_ACCUMULATOR}.fail_all")
def close_producer_by_hand(producer: Any, error: BaseException) -> None:
    """Mark `producer` closed and fail what it still queues with `error`, so
    nobody awaits a delivery forever (its ``stop()`` did not finish)."""
    producer._closed = True
    producer._message_accumulator.fail_all(error)


@_uses("closing by hand", f"{_PRODUCER}._sender", f"{_SENDER}.sender_task")
def sender_task(producer: Any) -> asyncio.Task[Any] | None:
    """The task of `producer`'s sender loop, or None before it was started."""
    sender = producer._sender
    task: asyncio.Task[Any] | None = sender.sender_task if sender is not None else None
    return task


@_uses("closing by hand", f"{_CONSUMER}._closed")
def close_consumer_by_hand(consumer: Any) -> None:
    """Mark `consumer` closed (its ``stop()`` did not finish)."""
    consumer._closed = True


@_uses("closing by hand", f"{_CONSUMER}._fetcher", f"{_FETCHER}._fetch_task")
def fetch_task(consumer: Any) -> asyncio.Task[Any] | None:
    """The task of `consumer`'s fetch loop, or None before it was started."""
    fetcher = consumer._fetcher
    task: asyncio.Task[Any] | None = fetcher._fetch_task if fetcher is not None else None
    return task


@_uses("closing by hand", f"{_CONSUMER}._fetcher", f"{_FETCHER}._pending_tasks")
def pending_fetch_tasks(consumer: Any) -> list[asyncio.Task[Any]]:
    """The tasks `consumer`'s fetcher runs for the requests in flight."""
    fetcher = consumer._fetcher
    return list(fetcher._pending_tasks) if fetcher is not None else []


@_uses("closing by hand", f"{_CONSUMER}._client")
def consumer_network_client(consumer: Any) -> Any:
    """`consumer`'s ``AIOKafkaClient`` (to guard its bootstrap, or close it)."""
    return consumer._client


@_uses("closing by hand", f"{_ADMIN}._client")
def admin_network_client(admin: Any) -> Any:
    """`admin`'s ``AIOKafkaClient`` (to guard its bootstrap, or close it)."""
    return admin._client


# --------------------------------------------------------- the admin client

@_uses("admin requests", f"{_ADMIN}._send_request")
async def admin_send(admin: Any, request: Any) -> Any:
    """Send `request`, which the admin client has no method for, to any broker."""
    return await admin._send_request(request)


# ------------------------------------------------ the transaction manager

TransactionState = _uses(
    "transaction manager",
    "aiokafka.producer.transaction_manager:TransactionState",
)(_transaction_manager.TransactionState)
"""The states of a producer's transaction manager."""


@_uses("transaction manager", f"{_PRODUCER}._txn_manager", f"{_MANAGER}.state")
def transaction_state(producer: Any) -> Any:
    """The `TransactionState` of `producer`'s transaction manager."""
    return producer._txn_manager.state


@_uses("transaction manager", f"{_PRODUCER}._txn_manager", f"{_MANAGER}.producer_id",
       f"{_MANAGER}.producer_epoch")
def producer_identity(producer: Any) -> tuple[int, int]:
    """(producer id, epoch) the transactional `producer` writes under."""
    manager = producer._txn_manager
    return int(manager.producer_id), int(manager.producer_epoch)


@_uses("transaction manager", f"{_PRODUCER}._txn_manager", f"{_MANAGER}.transactional_id")
def transactional_id(producer: Any) -> str:
    """The transactional id of `producer`."""
    txn_id: str = producer._txn_manager.transactional_id
    return txn_id


@_uses("transaction manager", f"{_PRODUCER}._txn_manager", f"{_MANAGER}.begin_transaction")
def begin_transaction(producer: Any) -> None:
    """Open a transaction in `producer`'s manager (``begin_transaction()`` without
    its checks, which the caller made)."""
    producer._txn_manager.begin_transaction()


@_uses("transaction manager", f"{_PRODUCER}._txn_manager", f"{_MANAGER}.is_fatal_error")
def is_fatal(producer: Any) -> bool:
    """Whether `producer`'s manager is in its fatal state (it cannot write again)."""
    return bool(producer._txn_manager.is_fatal_error())


@_uses("transaction manager", f"{_PRODUCER}._txn_manager",
       f"{_MANAGER}.wait_for_transaction_end")
def wait_for_transaction_end(producer: Any) -> Awaitable[Any]:
    """What resolves when `producer`'s committing or aborting transaction has ended."""
    waiting: Awaitable[Any] = producer._txn_manager.wait_for_transaction_end()
    return waiting


@_uses("transaction manager", f"{_PRODUCER}._txn_manager",
       f"{_MANAGER}._transaction_waiter")
def fatal_cause(producer: Any) -> BaseException | None:
    """The error that failed `producer`'s last transaction, if it holds one."""
    waiter = producer._txn_manager._transaction_waiter
    if waiter is not None and waiter.done() and not waiter.cancelled():
        cause: BaseException | None = waiter.exception()
        return cause
    return None


@_uses("transaction manager", f"{_PRODUCER}._txn_manager",
       f"{_MANAGER}._transaction_waiter", f"{_PRODUCER}._message_accumulator",
       f"{_ACCUMULATOR}._batches", f"{_ACCUMULATOR}._pending_batches",
       "aiokafka.producer.message_accumulator:MessageBatch.future",
       "aiokafka.producer.message_accumulator:MessageBatch._drain_waiter")
def undelivered_futures(producer: Any) -> list[asyncio.Future[Any] | None]:
    """The futures aiokafka fails with a fence: the transaction waiter, and each
    queued batch's future and drain waiter."""
    accumulator = producer._message_accumulator
    batches = [b for queue in accumulator._batches.values() for b in queue]
    futures: list[asyncio.Future[Any] | None] = [producer._txn_manager._transaction_waiter]
    for batch in [*batches, *accumulator._pending_batches]:
        futures.extend((batch.future, batch._drain_waiter))
    return futures


@_uses("moving to a bumped epoch", f"{_PRODUCER}._txn_manager",
       "aiokafka.producer.transaction_manager:PidAndEpoch",
       f"{_MANAGER}._pid_and_epoch", f"{_MANAGER}._sequence_numbers")
def move_to_epoch(producer: Any, producer_id: int, producer_epoch: int) -> None:
    """Make READY `producer` write as (`producer_id`, `producer_epoch`) from now on,
    its sequence numbers restarting at 0 (the public ``set_pid_and_epoch`` may
    run only once per producer)."""
    manager = producer._txn_manager
    manager._pid_and_epoch = _transaction_manager.PidAndEpoch(producer_id, producer_epoch)
    manager._sequence_numbers.clear()


# ------------------------------- a producer started apart from its sender

@_uses("starting the sender apart", f"{_PRODUCER}._sender",
       f"{_SENDER}._find_coordinator", "aiokafka.client:CoordinationType")
async def find_transaction_coordinator(producer: Any, txn_id: str) -> int:
    """The node id of `txn_id`'s transaction coordinator, found and kept by
    `producer`'s sender."""
    node: int = await producer._sender._find_coordinator(CoordinationType.TRANSACTION, txn_id)
    return node


@_uses("starting the sender apart", f"{_PRODUCER}._sender", f"{_SENDER}.start")
async def start_sender(producer: Any) -> None:
    """Start `producer`'s sender (its InitProducerId, then its loop): the part of
    ``AIOKafkaProducer.start()`` left once its client was started."""
    await producer._sender.start()


@_uses("starting from a seed", "aiokafka.cluster:ClusterMetadata.update_metadata",
       "aiokafka.protocol.metadata:MetadataRequest", f"{_CLIENT}._topics",
       f"{_CLIENT}._sync_task", f"{_CLIENT}._md_synchronizer", f"{_PRODUCER}._sender",
       f"{_SENDER}._coordinators", "aiokafka.client:CoordinationType")
def seed_client(producer: Any, metadata: Any, topics: Iterable[str], coordinator: int) -> None:
    """Put `producer`'s client (not started) in the state a bootstrap and a first
    metadata refresh leave it in, from `metadata` (a MetadataRequest's response),
    tracking `topics`, its sender's transaction coordinator known as `coordinator`."""
    client = producer.client
    client.cluster.update_metadata(metadata)
    # Set directly: ``set_topics`` would ask for the metadata just seeded.
    client._topics = set(topics)
    # What ``bootstrap()`` starts once it has the cluster's metadata.
    client._sync_task = asyncio.ensure_future(client._md_synchronizer())
    producer._sender._coordinators[CoordinationType.TRANSACTION] = coordinator


# ------------------------------------------- the sender's retry backoffs

_AddPartitionsBackoff = Callable[[Any, "float | None", bool], "float | None"]
_InitPidBackoff = Callable[[Any, "float | None"], "float | None"]


@_uses("sender retry backoffs", f"{_SENDER}._txn_manager",
       f"{_MANAGER}.txn_partitions", "aiokafka.producer.sender:BaseHandler._sender",
       "aiokafka.producer.sender:AddPartitionsToTxnHandler.handle_response")
class _AddPartitions(_sender.AddPartitionsToTxnHandler):  # type: ignore[misc]
    def __init__(self, sender: Any, partitions: Any, backoff: _AddPartitionsBackoff) -> None:
        super().__init__(sender, partitions)
        self._backoff = backoff

    def handle_response(self, response: Any) -> float | None:
        first = not self._sender._txn_manager.txn_partitions
        chosen: float | None = super().handle_response(response)
        return self._backoff(response, chosen, first)


@_uses("sender retry backoffs", "aiokafka.producer.sender:InitPIDHandler.handle_response")
class _InitPid(_sender.InitPIDHandler):  # type: ignore[misc]
    def __init__(self, sender: Any, backoff: _InitPidBackoff) -> None:
        super().__init__(sender)
        self._backoff = backoff

    def handle_response(self, response: Any) -> float | None:
        chosen: float | None = super().handle_response(response)
        return self._backoff(response, chosen)


@_uses("sender retry backoffs", f"{_PRODUCER}._sender", f"{_SENDER}._find_coordinator",
       f"{_SENDER}._txn_manager", f"{_MANAGER}.transactional_id",
       "aiokafka.producer.sender:BaseHandler.do", f"{_SENDER}._do_add_partitions_to_txn",
       f"{_SENDER}._do_init_pid", "aiokafka.client:CoordinationType")
def override_transaction_backoffs(producer: Any, add_partitions: _AddPartitionsBackoff,
                                  init_pid: _InitPidBackoff) -> None:
    """Let `producer`'s sender (not started) wait what `add_partitions` and
    `init_pid` choose before it retries AddPartitionsToTxn and InitProducerId.

    Each is called with the response and the wait aiokafka chose (None: no
    retry); `add_partitions` also learns whether the transaction had no
    partition yet when the response came.
    """
    sender = producer._sender

    async def add_partitions_to_txn(partitions: Any) -> bool:
        node_id = await sender._find_coordinator(
            CoordinationType.TRANSACTION, sender._txn_manager.transactional_id)
        done: bool = await _AddPartitions(sender, partitions, add_partitions).do(node_id)
        return done

    async def init_pid_request(node_id: int) -> bool:
        done: bool = await _InitPid(sender, init_pid).do(node_id)
        return done

    # Instance attributes shadow the Sender's methods of the same names,
    # which its loops call through ``self``.
    sender._do_add_partitions_to_txn = add_partitions_to_txn
    sender._do_init_pid = init_pid_request


# ---------------------------------------------- a lease in requests of our own

@_uses("lease requests of our own", f"{_PRODUCER}._sender", f"{_SENDER}._coordinators",
       "aiokafka.client:CoordinationType")
def transaction_coordinator(producer: Any) -> int | None:
    """The transaction coordinator `producer`'s sender knows, or None."""
    node: int | None = producer._sender._coordinators.get(CoordinationType.TRANSACTION)
    return node


@_uses("lease requests of our own", f"{_PRODUCER}._sender", f"{_SENDER}._coordinator_dead",
       "aiokafka.client:CoordinationType")
def mark_transaction_coordinator_dead(producer: Any) -> None:
    """Make `producer`'s sender look its transaction coordinator up again."""
    producer._sender._coordinator_dead(CoordinationType.TRANSACTION)


@_uses("lease requests of our own", f"{_PRODUCER}._sender", f"{_SENDER}._retry_backoff")
def retry_backoff(producer: Any) -> float:
    """Seconds `producer`'s sender waits before a retry (``retry_backoff_ms``)."""
    return float(producer._sender._retry_backoff)


@_uses("lease requests of our own", f"{_PRODUCER}._txn_manager",
       f"{_MANAGER}.txn_partitions")
def add_transaction_partition(producer: Any, tp: Any) -> None:
    """Count `tp` in `producer`'s open transaction, without waking its sender
    (the caller added it with a request of its own)."""
    producer._txn_manager.txn_partitions.add(tp)


@_uses("lease requests of our own", f"{_PRODUCER}._txn_manager",
       f"{_MANAGER}.sequence_number")
def sequence_number(producer: Any, tp: Any) -> int:
    """The sequence number `producer`'s next record to `tp` carries."""
    return int(producer._txn_manager.sequence_number(tp))


@_uses("lease requests of our own", f"{_PRODUCER}._txn_manager",
       f"{_MANAGER}.increment_sequence_number")
def increment_sequence_number(producer: Any, tp: Any, by: int) -> None:
    """Move `producer`'s sequence number of `tp` by `by` (negative: take a record back)."""
    producer._txn_manager.increment_sequence_number(tp, by)


@_uses("lease requests of our own", f"{_PRODUCER}._txn_manager",
       f"{_MANAGER}._transition_to", f"{_MANAGER}.complete_transaction",
       "aiokafka.producer.transaction_manager:TransactionState")
def complete_committed_transaction(producer: Any) -> None:
    """Tell `producer`'s manager its transaction was committed by an EndTxn of
    our own (``committing_transaction()`` would wake the sender to send one)."""
    manager = producer._txn_manager
    manager._transition_to(TransactionState.COMMITTING_TRANSACTION)
    manager.complete_transaction()


@_uses("lease requests of our own", "aiokafka.record.default_records:DefaultRecordBatchBuilder")
def lease_record_batch(producer_id: int, producer_epoch: int, base_sequence: int,
                       key: bytes, value: bytes | None) -> bytes:
    """A transactional record batch (magic 2, uncompressed) holding one record."""
    builder = DefaultRecordBatchBuilder(
        2, 0, is_transactional=1, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=base_sequence, batch_size=0)
    builder.append(0, timestamp=None, key=key, value=value, headers=[])
    return bytes(builder.build())


class _Header:
    __slots__ = ("_data",)

    def __init__(self, data: bytes) -> None:
        self._data = data

    def encode(self) -> bytes:
        return self._data


class _ResponseHeader:
    __slots__ = ("correlation_id",)

    def __init__(self, correlation_id: int) -> None:
        self.correlation_id = correlation_id


class _Body:
    """The response "type": the body's bytes, read by the caller."""

    @staticmethod
    def decode(data: BytesIO) -> bytes:
        return data.read()


_I32_SIZE = 4


@_uses("lease requests of our own", "aiokafka.conn:AIOKafkaConnection.send",
       "aiokafka.conn:AIOKafkaConnection._handle_frame")
class RawRequest:
    """A request already packed, in the shape aiokafka's connection sends.

    ``AIOKafkaConnection.send`` asks a request to ``prepare`` itself for the
    connection's negotiated versions, then for a header and a body, and its
    ``_handle_frame`` later asks it to read the response header and decode
    the body. A broker that does not support the version gets
    ``IncompatibleBrokerVersion`` before anything is written. `header` packs
    (api key, version, correlation id, client id) into a request header.
    """

    RESPONSE_TYPE = _Body

    def __init__(self, api: tuple[int, int], body: bytes,
                 header: Callable[[int, int, int, str], bytes]) -> None:
        self.api_key, self.version = api
        self._body = body
        self._header = header

    def prepare(self, versions: dict[int, tuple[int, int]]) -> RawRequest:
        low, high = versions.get(self.api_key, (0, -1))
        if not low <= self.version <= high:
            raise _errors.IncompatibleBrokerVersion(
                f"the broker does not support API {self.api_key} v{self.version}")
        return self

    def build_request_header(self, correlation_id: int, client_id: str) -> _Header:
        return _Header(self._header(self.api_key, self.version, correlation_id, client_id))

    def encode(self) -> bytes:
        return self._body

    def parse_response_header(self, data: BytesIO) -> _ResponseHeader:
        correlation_id = int.from_bytes(data.read(_I32_SIZE), "big", signed=True)
        return _ResponseHeader(correlation_id)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(api={self.api_key}, version={self.version})"


# ------------------------------------------------ one connection per broker

@_uses("one connection per broker", "aiokafka.client:ConnectionGroup")
def default_connection_group() -> Any:
    """The connection group of a client's Produce and Metadata requests."""
    return ConnectionGroup.DEFAULT


# ------------------------------------------------------------ the consumer

@_uses("consumer position", f"{_CONSUMER}._subscription",
       "aiokafka.consumer.subscription_state:SubscriptionState.subscription",
       "aiokafka.consumer.subscription_state:Subscription.assignment",
       "aiokafka.consumer.subscription_state:Assignment.state_value",
       "aiokafka.consumer.subscription_state:TopicPartitionState.has_valid_position",
       "aiokafka.consumer.subscription_state:TopicPartitionState.position")
def fetch_position(consumer: Any, tp: Any) -> int | None:
    """The next offset `consumer` fetches in `tp`, or None while it is being reset,
    read without awaiting (``consumer.position()`` can wait for a reset)."""
    assignment = consumer._subscription.subscription.assignment
    state = assignment.state_value(tp) if assignment is not None else None
    if state is None or not state.has_valid_position:
        return None
    return int(state.position)


@_uses("consumer position", f"{_CONSUMER}._fetcher", f"{_FETCHER}._proc_fetch_request")
def on_fetch_response(consumer: Any, taken_in: Callable[[], None]) -> None:
    """Call `taken_in` each time started `consumer`'s fetcher has taken in a Fetch
    response (records stored, marks and errors recorded), with records or not."""
    fetcher = consumer._fetcher
    handle = fetcher._proc_fetch_request

    async def handled(*args: Any) -> Any:
        try:
            return await handle(*args)
        finally:
            taken_in()

    fetcher._proc_fetch_request = handled


# --------------------------------------------------------- the error table

@_uses("broker error table", "aiokafka.errors:kafka_errors")
def extend_error_table(classes: Mapping[int, type[BaseException]]) -> None:
    """Make ``aiokafka.errors.for_code`` know the broker codes of `classes`.

    Idempotent; never replaces a class aiokafka already maps, so a later
    aiokafka that defines a code keeps its own class.
    """
    for code, cls in classes.items():
        _errors.kafka_errors.setdefault(code, cls)


# -------------------------------------------------- hand-written protocol messages

OwnRequest = _uses("protocol messages", "aiokafka.protocol.api:Request.build")(Request)
"""aiokafka's base of requests, for one it does not define: a subclass
(``OwnRequest[Struct_v3 | Struct_v4]``) builds, in ``build``, the struct of the
version the connection chose."""


@_uses("protocol messages", "aiokafka.protocol.api:RequestStruct.FLEXIBLE_VERSION")
class FlexibleRequestStruct(RequestStruct):  # type: ignore[misc, unused-ignore]
    """A flexible request version: aiokafka sends request header v2 and reads
    response header v1 (correlation id, then a tag buffer)."""

    FLEXIBLE_VERSION = True
    # Placeholders for aiokafka's __init_subclass__ check; every subclass sets its own.
    API_KEY = -1
    API_VERSION = -1
    RESPONSE_TYPE = Response
    SCHEMA = Schema()


@_uses("protocol messages", "aiokafka.protocol.api:RequestStruct.parse_response_header",
       "aiokafka.protocol.api:ResponseHeader_v0")
class V0ResponseHeader:
    """A request struct whose response header is v0 whatever its version."""

    def parse_response_header(self, read_buffer: BytesIO | bytes) -> Any:
        return ResponseHeader_v0.decode(read_buffer)


GROUPS: Mapping[str, tuple[str, ...]] = {
    group: tuple(names) for group, names in _GROUPS.items()}
"""The internals each group of functions uses, by group."""

INTERNALS: tuple[str, ...] = tuple(dict.fromkeys(
    name for names in GROUPS.values() for name in names))
"""Every aiokafka internal the adapter uses, as the functions above declare them."""

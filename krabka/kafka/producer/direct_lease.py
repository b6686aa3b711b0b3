"""A lease record written and committed with requests of our own making.

Most writes of a held role are renewals: one lease record in a transaction of
its own. Through aiokafka's producer each costs three round trips and the
producer's machinery around them: the sender task wakes several times, a task
per request, aiokafka's generic field-by-field encoder and decoder, and a
timeout context per request. That machinery, not the broker, is what stops one
process from renewing thousands of roles (docs/benchmarks.md at 00e58f5, "the direct lease
write"). Here the same three requests, AddPartitionsToTxn v0, Produce v8 and
EndTxn v0, are packed from fixed layouts and their small answers read at fixed
positions. They go through the role producer's own client (its connections,
security and reconnects), and the producer's transaction manager is kept
exactly in step with the broker, so everything else (another record in the same
transaction, an abort, the settling of an abandoned transaction, a conditional
bump) stays aiokafka's, unchanged:

* the producer id, epoch and the partition's sequence number are the manager's,
  so the broker fences these requests exactly as it fences aiokafka's;
* once the coordinator has added the partition, the manager is told so, so an
  abort from aiokafka sends EndTxn(abort) for it;
* the sequence number is taken before the Produce goes out, as aiokafka takes
  it before it sends a batch; a Produce without a definite answer is sent
  again byte for byte until one comes (the broker drops a duplicate), and a
  definite refusal gives the number back. The lease on the log is therefore
  always the one the tenure believes it wrote;
* the record batch is built by aiokafka's own builder.

Each step falls back on aiokafka's producer when it could not begin: an
AddPartitionsToTxn that fails for any reason but a fence or
CONCURRENT_TRANSACTIONS (asked again as promptly as aiokafka's own is, see
`krabka.kafka.producer.prompt_retry`) (aiokafka's sender
adds the partition again, which the coordinator accepts for an open
transaction), a Produce never sent (no leader known, a broker without v8), an
EndTxn that did not succeed (aiokafka commits: retrying a commit that already
completed is answered with success). None of the steps bounds itself: the
caller (`krabka.kafka.producer.fenced.RoleProducer`) bounds the whole by the
transaction timeout and closes the producer when it is reached.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any, Final

from aiokafka import errors as _errors  # type: ignore[import-untyped, unused-ignore]
from aiokafka.structs import TopicPartition  # type: ignore[import-untyped, unused-ignore]

from krabka.kafka.aiokafka_internals import (
    RawRequest,
    add_transaction_partition,
    complete_committed_transaction,
    increment_sequence_number,
    lease_record_batch,
    mark_transaction_coordinator_dead,
    producer_identity,
    retry_backoff,
    sequence_number,
    transaction_coordinator,
    transactional_id,
)
from krabka.kafka.producer.prompt_retry import RetrySchedule
from krabka.kafka.protocol.messages import (
    CONCURRENT_TRANSACTIONS,
    COORDINATOR_NOT_AVAILABLE,
    FENCE_ERROR_CODES,
    NO_ERROR,
    NOT_COORDINATOR,
)

__all__ = [
    "ADD_PARTITIONS_TO_TXN",
    "END_TXN",
    "PRODUCE",
    "DirectRequest",
    "ProducerStateLost",
    "add_partitions_to_txn_body",
    "commit",
    "end_txn_body",
    "produce_body",
    "read_add_partitions_to_txn",
    "read_end_txn",
    "read_produce",
    "write",
]

# (API key, version) of each request; the layouts below are these versions'.
ADD_PARTITIONS_TO_TXN: Final = (24, 0)
PRODUCE: Final = (0, 8)
END_TXN: Final = (26, 0)

DUPLICATE_SEQUENCE_NUMBER: Final = 46
# Answers after which the producer's sequence numbers or transaction no longer
# match the broker's: the producer cannot write again (aiokafka goes fatal too).
_STATE_LOST: Final = frozenset({45, 48, 59})  # OUT_OF_ORDER_SEQUENCE, INVALID_TXN_STATE,
#                                                UNKNOWN_PRODUCER_ID

_HEADER = struct.Struct(">hhi")  # api key, version, correlation id
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ID_EPOCH = struct.Struct(">qh")
_PRODUCE_HEAD = struct.Struct(">hii")  # acks, timeout, number of topics
_PARTITION_RECORDS = struct.Struct(">iii")  # one partition, its index, records size
_PARTITION_ANSWER = struct.Struct(">ihq")  # index, error code, base offset


class ProducerStateLost(Exception):
    """The broker's answer shows the producer's sequence numbers or
    transaction out of step with it; `cause` is aiokafka's error for it."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"the broker answered {cause!r}")
        self.cause = cause


def _string(text: str) -> bytes:
    data = text.encode()
    return _I16.pack(len(data)) + data


def add_partitions_to_txn_body(transactional_id: str, producer_id: int, epoch: int,
                               topic: str, partition: int) -> bytes:
    """AddPartitionsToTxn v0: one partition of one topic."""
    return b"".join((_string(transactional_id), _ID_EPOCH.pack(producer_id, epoch),
                     _I32.pack(1), _string(topic), _I32.pack(1), _I32.pack(partition)))


def produce_body(transactional_id: str, timeout_ms: int, topic: str, partition: int,
                 records: bytes) -> bytes:
    """Produce v8 with acks=all: one record batch for one partition."""
    return b"".join((_string(transactional_id), _PRODUCE_HEAD.pack(-1, timeout_ms, 1),
                     _string(topic), _PARTITION_RECORDS.pack(1, partition, len(records)),
                     records))


def end_txn_body(transactional_id: str, producer_id: int, epoch: int, commit: bool) -> bytes:
    """EndTxn v0."""
    return _string(transactional_id) + _ID_EPOCH.pack(producer_id, epoch) + bytes((commit,))


def _skip_string(data: bytes, at: int) -> int:
    (size,) = _I16.unpack_from(data, at)
    return at + 2 + max(int(size), 0)


def read_add_partitions_to_txn(body: bytes) -> int:
    """The error code of the one partition of an AddPartitionsToTxn v0 answer."""
    at = _skip_string(body, 4 + 4)  # throttle time, one topic; its name
    (code,) = _I16.unpack_from(body, at + 4 + 4)  # one partition; its index
    return int(code)


def read_produce(body: bytes) -> tuple[int, int]:
    """(error code, base offset) of the one partition of a Produce v8 answer."""
    at = _skip_string(body, 4)  # one topic; its name
    _, code, offset = _PARTITION_ANSWER.unpack_from(body, at + 4)
    return int(code), int(offset)


def read_end_txn(body: bytes) -> int:
    """The error code of an EndTxn v0 answer."""
    (code,) = _I16.unpack_from(body, 4)  # after the throttle time
    return int(code)


def _request_header(api_key: int, version: int, correlation_id: int, client_id: str) -> bytes:
    return _HEADER.pack(api_key, version, correlation_id) + _string(client_id)


class DirectRequest(RawRequest):
    """A request of a lease write, packed here, its header request header v1."""

    def __init__(self, api: tuple[int, int], body: bytes) -> None:
        super().__init__(api, body, _request_header)


def _error(code: int) -> BaseException:
    error: BaseException = _errors.for_code(code)()
    return error


async def write(producer: Any, topic: str, partition: int, key: bytes,
                value: bytes | None, timeout_ms: int) -> int | None:
    """Add `partition` to the producer's open transaction and write one record
    there; return its offset, or None when nothing was written (aiokafka's
    producer then writes it: the manager is in step with what was done).

    The transaction must be open in the manager with nothing sent yet. Raises
    aiokafka's error for a fence or a refusal (the record is not written),
    `ProducerStateLost` when the producer cannot write again.
    """
    client = producer.client
    coordinator = transaction_coordinator(producer)
    if coordinator is None:
        return None
    txn_id = transactional_id(producer)
    producer_id, epoch = producer_identity(producer)
    tp = TopicPartition(topic, partition)
    request = DirectRequest(ADD_PARTITIONS_TO_TXN, add_partitions_to_txn_body(
        txn_id, producer_id, epoch, topic, partition))
    schedule = RetrySchedule()
    while True:
        try:
            answer = await client.send(coordinator, request)
        except (_errors.KafkaError, OSError):
            return None
        code = read_add_partitions_to_txn(answer)
        if code in FENCE_ERROR_CODES:
            raise _error(code)
        if code != CONCURRENT_TRANSACTIONS:
            break
        # The previous transaction's markers are still being written: asked
        # again as promptly as `krabka.kafka.producer.prompt_retry` asks.
        await asyncio.sleep(schedule.next(retry_backoff(producer)))
    if code != NO_ERROR:
        return None
    # The manager's own way (maybe_add_partition_to_txn, then partition_added)
    # wakes the producer's sender for nothing to do: 5 % of a worker holding
    # 6 000 roles (docs/benchmarks.md).
    add_transaction_partition(producer, tp)
    return await _produce(producer, tp, key, value, timeout_ms)


async def _produce(producer: Any, tp: Any, key: bytes, value: bytes | None,
                   timeout_ms: int) -> int | None:
    client = producer.client
    backoff = retry_backoff(producer)
    producer_id, epoch = producer_identity(producer)
    batch = lease_record_batch(producer_id, epoch, sequence_number(producer, tp), key, value)
    request = DirectRequest(PRODUCE, produce_body(
        transactional_id(producer), timeout_ms, tp.topic, tp.partition, batch))
    increment_sequence_number(producer, tp, 1)
    sent = False
    while True:
        leader = client.cluster.leader_for_partition(tp)
        if leader is None or leader < 0:
            if not sent:
                increment_sequence_number(producer, tp, -1)
                return None
            await client.force_metadata_update()
            await asyncio.sleep(backoff)
            continue
        try:
            answer = await client.send(leader, request)
        except _errors.IncompatibleBrokerVersion:
            if sent:
                raise
            increment_sequence_number(producer, tp, -1)
            return None
        except (_errors.KafkaError, OSError):
            # Perhaps written, perhaps not: only the same bytes may follow.
            sent = True
            await asyncio.sleep(backoff)
            continue
        sent = True
        code, offset = read_produce(answer)
        if code in (NO_ERROR, DUPLICATE_SEQUENCE_NUMBER):
            return offset
        error = _error(code)
        if code in FENCE_ERROR_CODES:
            raise error
        if code in _STATE_LOST:
            raise ProducerStateLost(error)
        if not getattr(error, "retriable", False):
            increment_sequence_number(producer, tp, -1)  # refused: not written
            raise error
        if getattr(error, "invalid_metadata", False):
            await client.force_metadata_update()
        await asyncio.sleep(backoff)


async def commit(producer: Any) -> None:
    """Commit the producer's open transaction, whose records `write` wrote.

    One EndTxn of our own; any answer but success or a fence hands the commit
    to aiokafka's producer, which retries it (a commit that already completed
    is answered with success).
    """
    coordinator = transaction_coordinator(producer)
    code = None
    if coordinator is not None:
        producer_id, epoch = producer_identity(producer)
        try:
            answer = await producer.client.send(coordinator, DirectRequest(
                END_TXN, end_txn_body(transactional_id(producer), producer_id, epoch, True)))
        except (_errors.KafkaError, OSError):
            mark_transaction_coordinator_dead(producer)
        else:
            code = read_end_txn(answer)
    if code in FENCE_ERROR_CODES:
        raise _error(code)
    if code in (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR):
        mark_transaction_coordinator_dead(producer)
    if code == NO_ERROR:
        complete_committed_transaction(producer)
        return
    await producer.commit_transaction()

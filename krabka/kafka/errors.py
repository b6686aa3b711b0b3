"""What the Kafka adapter raises, and how it tells a fence from any other failure.

The protocol's safety rests on one rule (docs/design.md#the-kafka-adapter): every fence signal,
whatever shape aiokafka gives it, surfaces as `FencedError`. aiokafka shows a
fence as ``ProducerFenced`` (the sender's class for broker code 47, and our
class for 90), as ``InvalidProducerEpoch`` (47) or ``TransactionCoordinatorFenced``
(52) from a handler that does not special-case them, or wrapped as the cause
of a ``KafkaError("Unexpected error during batch delivery")``. `fence_in` walks
the whole cause chain so none of these shapes is missed.

Every other failure of Kafka is a `KafkaTransportError`, a `TransportError`:
the leadership loop retries those until the fence deadline and never mistakes
them for a lost epoch. An exception that is not aiokafka's (a `TypeError`
from a bug) is not wrapped: it propagates as it is and ends the tenure.
"""

from __future__ import annotations

from aiokafka import errors as _errors  # type: ignore[import-untyped, unused-ignore]

from krabka.errors import CoordinationError, EpochLostError, TransportError
from krabka.kafka.protocol.messages import FENCE_ERROR_CODES

__all__ = [
    "KafkaTransportError",
    "KafkaUnavailableError",
    "MarksTooLargeError",
    "ProducerFatalError",
    "fence_in",
    "is_outage",
    "is_transient",
]

# What aiokafka, asyncio and the socket layer raise for a failure of the
# cluster or the network. aiokafka's ConsumerStoppedError is not a KafkaError.
_OUTAGES: tuple[type[BaseException], ...] = (
    _errors.KafkaError, _errors.ConsumerStoppedError, TimeoutError, OSError,
)

# 52 TRANSACTION_COORDINATOR_FENCED belongs to broker-to-broker marker writes, but
# a client that ever sees it is talking to a deposed coordinator epoch: a fence.
_FENCE_CODES = FENCE_ERROR_CODES | {52}
_FENCE_CLASSES: tuple[type[BaseException], ...] = (
    _errors.ProducerFenced,
    _errors.InvalidProducerEpoch,
    _errors.TransactionCoordinatorFenced,
)


class KafkaTransportError(TransportError):
    """A Kafka operation failed for a reason other than a fence.

    The message names the operation and what to check. Retrying may help;
    the role's epoch is not known to have moved on.
    """


class KafkaUnavailableError(KafkaTransportError):
    """The cluster (or the transaction coordinator) did not answer in time.

    Raised instead of hanging: every network wait of the adapter is bounded.
    """


class ProducerFatalError(KafkaTransportError, EpochLostError):
    """A role's transactional producer failed fatally without being fenced,
    or was closed after a call outlived the transaction timeout.

    The producer is closed and forgotten; its epoch can no longer write
    through this transport. Acquire a new epoch to lead again.
    """


class MarksTooLargeError(CoordinationError, ValueError):
    """A `TermFilter`'s marks do not fit in a partition's offset-commit metadata.

    Kafka stores at most ``offset.metadata.max.bytes`` (4096 by default) with
    each committed offset; nothing was committed. The message names the
    partition and the size.
    """


def fence_in(exc: BaseException | None) -> BaseException | None:
    """The fence signal in `exc` or its causes, or None if there is none."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if _is_fence(exc):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def is_outage(exc: BaseException) -> bool:
    """Whether `exc` is a failure of Kafka or the network (retryable), not a bug."""
    return isinstance(exc, _OUTAGES)


def is_transient(exc: BaseException) -> bool:
    """Whether `exc` is an outage the same request, sent again, can outlast: the
    broker or the network away for a while (aiokafka's retriable errors and
    timeouts), not a refusal that every retry meets again (an authorization,
    a record too large) nor a stopped client."""
    if isinstance(exc, (_errors.KafkaTimeoutError, TimeoutError, OSError)):
        return True
    return isinstance(exc, _errors.KafkaError) and bool(exc.retriable)


def _is_fence(exc: BaseException) -> bool:
    if isinstance(exc, _FENCE_CLASSES):
        return True
    return isinstance(exc, _errors.BrokerResponseError) and exc.errno in _FENCE_CODES

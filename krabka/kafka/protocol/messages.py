"""Kafka protocol messages that aiokafka 0.14 lacks, written with aiokafka's own classes.

aiokafka 0.14 speaks only the request versions it was written for. The Kafka adapter
needs four things it does not define, so they are hand-written here, field by field
from Apache Kafka's message schemas (``clients/src/main/resources/common/message``):

* **DescribeTransactions (API key 65) v0**: ``describe_epoch`` asks the transaction
  coordinator for the current ``(producer_id, producer_epoch)`` of a role. aiokafka
  has no class for API key 65 at all. v0 is flexible: compact strings and arrays,
  a tag buffer after every struct, request header v2 and response header v1.
* **InitProducerId (API key 22) v3/v4**: aiokafka defines only v0, which cannot carry
  the caller's producer id and epoch. v3+ (KIP-360) carries them, and the
  coordinator then bumps the epoch only while that pair is still current and
  answers PRODUCER_FENCED (90) otherwise (v4+; v3 answers INVALID_PRODUCER_EPOCH,
  47). ``resign()`` uses this conditional bump. v5+ (KIP-890 error codes) and
  v6 (2PC, unstable) are deliberately not defined.
* **ApiVersions (API key 18) v3/v4**: aiokafka negotiates with ApiVersions v0, whose
  response has no feature information. v3+ carries the cluster's finalized
  features (``transaction.version`` among them) in tagged fields of the response;
  the tests assert that level. The ApiVersions response header is always v0
  (no tag buffer), even for flexible versions.
* **Error codes 90 PRODUCER_FENCED and 105 TRANSACTIONAL_ID_NOT_FOUND**: aiokafka
  maps unknown codes to ``UnknownError`` (errno -1), which would hide a fence. The
  classes below are added to aiokafka's error table by `register_error_codes`,
  which a `KafkaTransport` runs when it is created (without replacing any class
  aiokafka already has). ``ProducerFencedError`` also
  subclasses aiokafka's ``ProducerFenced``, so aiokafka's sender re-raises it
  unwrapped and ``except ProducerFenced`` catches it.

FindCoordinator is *not* redefined: aiokafka's ``FindCoordinatorRequest`` v1 carries
the key type, and ``AIOKafkaClient.coordinator_lookup(CoordinationType.TRANSACTION,
transactional_id)`` finds a transaction coordinator with it.

Requests send empty tag buffers only (aiokafka's ``TaggedFields.encode`` omits the
size of a non-empty tagged field's value). Responses are decoded with aiokafka's
decoder; the ``parse_*`` functions turn them into typed, frozen values.

Use a request like any of aiokafka's: ``await client.send(node_id, Request(...))``
negotiates the version per connection and returns the decoded response struct.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from io import BytesIO
from typing import Any, Final, TypeAlias

# aiokafka ships annotations but no py.typed marker. Under the repository's mypy
# configuration its modules are untyped (import-untyped, and subclassing Any is
# "misc" under --strict). With `follow_untyped_imports = true` for aiokafka those
# ignores become unused, which "unused-ignore" tolerates: this file checks clean
# either way.
from aiokafka import errors as _errors  # type: ignore[import-untyped, unused-ignore]
from aiokafka.protocol.api import Response  # type: ignore[import-untyped, unused-ignore]
from aiokafka.protocol.types import (  # type: ignore[import-untyped, unused-ignore]
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    TaggedFields,
)

from krabka.kafka.aiokafka_internals import (
    FlexibleRequestStruct,
    OwnRequest,
    V0ResponseHeader,
    extend_error_table,
)

__all__ = [
    "CONCURRENT_TRANSACTIONS",
    "COORDINATOR_LOAD_IN_PROGRESS",
    "COORDINATOR_NOT_AVAILABLE",
    "FENCE_ERROR_CODES",
    "INVALID_PRODUCER_EPOCH",
    "INVALID_TRANSACTION_TIMEOUT",
    "NOT_COORDINATOR",
    "NO_ERROR",
    "PRODUCER_FENCED",
    "TRANSACTIONAL_ID_NOT_FOUND",
    "ApiVersionsRequest",
    "ApiVersionsRequest_v3",
    "ApiVersionsRequest_v4",
    "ApiVersionsResponse_v3",
    "ApiVersionsResponse_v4",
    "BrokerApiVersions",
    "DescribeTransactionsRequest",
    "DescribeTransactionsRequest_v0",
    "DescribeTransactionsResponse_v0",
    "InitProducerIdRequest",
    "InitProducerIdRequest_v3",
    "InitProducerIdRequest_v4",
    "InitProducerIdResponse_v3",
    "InitProducerIdResponse_v4",
    "InitProducerIdResult",
    "ProducerFencedError",
    "TransactionDescription",
    "TransactionalIdNotFoundError",
    "parse_api_versions",
    "parse_describe_transactions",
    "parse_init_producer_id",
    "register_error_codes",
]

# Broker error codes the adapter branches on (org.apache.kafka.common.protocol.Errors).
NO_ERROR: Final = 0
COORDINATOR_LOAD_IN_PROGRESS: Final = 14
COORDINATOR_NOT_AVAILABLE: Final = 15
NOT_COORDINATOR: Final = 16
INVALID_PRODUCER_EPOCH: Final = 47
INVALID_TRANSACTION_TIMEOUT: Final = 50
CONCURRENT_TRANSACTIONS: Final = 51
PRODUCER_FENCED: Final = 90
TRANSACTIONAL_ID_NOT_FOUND: Final = 105

#: Every broker code that means "a newer epoch exists for this transactional id".
FENCE_ERROR_CODES: Final = frozenset({INVALID_PRODUCER_EPOCH, PRODUCER_FENCED})

# Identifies this client in ApiVersions v3+; the broker checks both strings against
# [a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])? and answers INVALID_REQUEST otherwise.
_CLIENT_SOFTWARE_NAME: Final = "krabka-coordination"
_CLIENT_SOFTWARE_VERSION: Final = "0.1.0"


def _str() -> CompactString:
    return CompactString("utf-8")


# --------------------------------------------------------------------------- errors


class ProducerFencedError(_errors.ProducerFenced, _errors.BrokerResponseError):  # type: ignore[misc, unused-ignore]
    """Broker error 90 PRODUCER_FENCED: a newer epoch exists for the transactional id.

    Newer request versions answer it where older ones answer 47
    INVALID_PRODUCER_EPOCH. A subclass of aiokafka's ``ProducerFenced``.
    """

    errno = PRODUCER_FENCED
    message = "PRODUCER_FENCED"
    description = (
        "There is a newer producer with the same transactionalId which fences the current one."
    )

    def __init__(self, *args: object) -> None:
        # aiokafka raises broker errors as ``for_code(code)(*anything)``;
        # ProducerFenced's own __init__ takes one optional message only.
        if args:
            _errors.KafkaError.__init__(self, *args)
        else:
            super().__init__(self.description)


class TransactionalIdNotFoundError(_errors.BrokerResponseError):  # type: ignore[misc, unused-ignore]
    """Broker error 105 TRANSACTIONAL_ID_NOT_FOUND (unknown or expiring transactional id)."""

    errno = TRANSACTIONAL_ID_NOT_FOUND
    message = "TRANSACTIONAL_ID_NOT_FOUND"
    description = "The transactionalId could not be found."


def register_error_codes() -> None:
    """Make ``aiokafka.errors.for_code`` know codes 90 and 105.

    Idempotent; never replaces a class aiokafka already maps. A
    `KafkaTransport` runs it when it is created, before its first request.
    """
    extend_error_table({PRODUCER_FENCED: ProducerFencedError,
                        TRANSACTIONAL_ID_NOT_FOUND: TransactionalIdNotFoundError})


# ------------------------------------------------------------- shared base classes


class _Response(Response):  # type: ignore[misc, unused-ignore]
    API_KEY = -1
    API_VERSION = -1


def _tags() -> dict[int, bytes]:
    """An empty tag buffer (the only kind this module sends)."""
    return {}


# ------------------------------------------------------- DescribeTransactions (65)


class DescribeTransactionsResponse_v0(_Response):
    API_KEY = 65
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "transaction_states",
            CompactArray(
                ("error_code", Int16),
                ("transactional_id", _str()),
                ("transaction_state", _str()),
                ("transaction_timeout_ms", Int32),
                ("transaction_start_time_ms", Int64),
                ("producer_id", Int64),
                ("producer_epoch", Int16),
                (
                    "topics",
                    CompactArray(
                        ("topic", _str()),
                        ("partitions", CompactArray(Int32)),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class DescribeTransactionsRequest_v0(FlexibleRequestStruct):
    API_KEY = 65
    API_VERSION = 0
    RESPONSE_TYPE = DescribeTransactionsResponse_v0
    SCHEMA = Schema(
        ("transactional_ids", CompactArray(_str())),
        ("tags", TaggedFields),
    )


class DescribeTransactionsRequest(OwnRequest[DescribeTransactionsRequest_v0]):  # type: ignore[misc, unused-ignore]
    """DescribeTransactions for some transactional ids; send it to their transaction
    coordinator (ids on other coordinators answer NOT_COORDINATOR, 16)."""

    API_KEY = 65

    def __init__(self, transactional_ids: Iterable[str]) -> None:
        self._transactional_ids = list(transactional_ids)

    def build(
        self, request_struct_class: type[DescribeTransactionsRequest_v0]
    ) -> DescribeTransactionsRequest_v0:
        return request_struct_class(self._transactional_ids, _tags())


@dataclass(frozen=True)
class TransactionDescription:
    """One entry of a DescribeTransactions response.

    ``state`` is the coordinator's name for it: Empty, Ongoing, PrepareCommit,
    PrepareAbort, CompleteCommit, CompleteAbort, Dead, PrepareEpochFence. When
    ``error_code`` is not 0 the other fields are the schema defaults (producer id
    and epoch 0, empty strings), not -1: check ``error_code`` first.
    """

    error_code: int
    transactional_id: str
    state: str
    timeout_ms: int
    start_time_ms: int
    producer_id: int
    producer_epoch: int
    topics: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


def parse_describe_transactions(
    response: DescribeTransactionsResponse_v0,
) -> list[TransactionDescription]:
    """The entries of a DescribeTransactions response, in response order."""
    result: list[TransactionDescription] = []
    for entry in response.get_item("transaction_states") or ():
        error_code, txn_id, state, timeout_ms, start_ms, pid, epoch, topics, _ = entry
        result.append(
            TransactionDescription(
                error_code=int(error_code),
                transactional_id=str(txn_id or ""),
                state=str(state or ""),
                timeout_ms=int(timeout_ms),
                start_time_ms=int(start_ms),
                producer_id=int(pid),
                producer_epoch=int(epoch),
                topics={
                    str(topic): tuple(int(p) for p in partitions or ())
                    for topic, partitions, _tags in topics or ()
                },
            )
        )
    return result


# ------------------------------------------------------------ InitProducerId (22)


class InitProducerIdResponse_v3(_Response):
    API_KEY = 22
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        ("producer_id", Int64),
        ("producer_epoch", Int16),
        ("tags", TaggedFields),
    )


class InitProducerIdResponse_v4(InitProducerIdResponse_v3):
    """Same layout as v3; v4 allows the broker to answer PRODUCER_FENCED (90)."""

    API_VERSION = 4


class InitProducerIdRequest_v3(FlexibleRequestStruct):
    API_KEY = 22
    API_VERSION = 3
    RESPONSE_TYPE = InitProducerIdResponse_v3
    SCHEMA = Schema(
        ("transactional_id", _str()),
        ("transaction_timeout_ms", Int32),
        ("producer_id", Int64),
        ("producer_epoch", Int16),
        ("tags", TaggedFields),
    )


class InitProducerIdRequest_v4(InitProducerIdRequest_v3):
    API_VERSION = 4
    RESPONSE_TYPE = InitProducerIdResponse_v4


_InitProducerIdStruct: TypeAlias = InitProducerIdRequest_v3 | InitProducerIdRequest_v4


class InitProducerIdRequest(OwnRequest[_InitProducerIdStruct]):  # type: ignore[misc, unused-ignore]
    """InitProducerId v4 (v3 if the broker lacks v4) for a transactional id.

    With ``producer_id``/``producer_epoch`` left at -1 it is the unconditional
    InitProducerId every producer sends (bumps the epoch, fences the holder).
    With the caller's pair it is KIP-360's conditional form: the coordinator bumps
    only while that pair is current, otherwise answers PRODUCER_FENCED (90; v3:
    INVALID_PRODUCER_EPOCH, 47). If the pair is the one the *previous conditional*
    bump replaced, the coordinator treats the request as a retry and answers the
    current pair without bumping again. Send it to the transaction coordinator.
    """

    API_KEY = 22

    def __init__(
        self,
        transactional_id: str,
        transaction_timeout_ms: int,
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> None:
        self._transactional_id = transactional_id
        self._transaction_timeout_ms = transaction_timeout_ms
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch

    def build(
        self,
        request_struct_class: type[_InitProducerIdStruct],
    ) -> _InitProducerIdStruct:
        return request_struct_class(
            self._transactional_id,
            self._transaction_timeout_ms,
            self._producer_id,
            self._producer_epoch,
            _tags(),
        )


@dataclass(frozen=True)
class InitProducerIdResult:
    error_code: int
    producer_id: int
    producer_epoch: int
    throttle_time_ms: int = 0


def parse_init_producer_id(response: InitProducerIdResponse_v3) -> InitProducerIdResult:
    return InitProducerIdResult(
        error_code=int(response.get_item("error_code")),
        producer_id=int(response.get_item("producer_id")),
        producer_epoch=int(response.get_item("producer_epoch")),
        throttle_time_ms=int(response.get_item("throttle_time_ms")),
    )


# --------------------------------------------------------------- ApiVersions (18)

# Layout of the values of the response's tagged fields (ApiVersionsResponse.json).
_SUPPORTED_FEATURES_TAG: Final = 0
_FINALIZED_FEATURES_EPOCH_TAG: Final = 1
_FINALIZED_FEATURES_TAG: Final = 2
_SUPPORTED_FEATURES = CompactArray(
    ("name", _str()),
    ("min_version", Int16),
    ("max_version", Int16),
    ("tags", TaggedFields),
)
_FINALIZED_FEATURES = CompactArray(
    ("name", _str()),
    ("max_version_level", Int16),
    ("min_version_level", Int16),
    ("tags", TaggedFields),
)


class ApiVersionsResponse_v3(_Response):
    API_KEY = 18
    API_VERSION = 3
    SCHEMA = Schema(
        ("error_code", Int16),
        (
            "api_keys",
            CompactArray(
                ("api_key", Int16),
                ("min_version", Int16),
                ("max_version", Int16),
                ("tags", TaggedFields),
            ),
        ),
        ("throttle_time_ms", Int32),
        # supported features (0), finalized features epoch (1), finalized features (2)
        ("tags", TaggedFields),
    )


class ApiVersionsResponse_v4(ApiVersionsResponse_v3):
    """Same layout as v3; v4 no longer omits features whose minimum version is 0."""

    API_VERSION = 4


class ApiVersionsRequest_v3(V0ResponseHeader, FlexibleRequestStruct):  # type: ignore[misc, unused-ignore]
    # KIP-511: the ApiVersions response header is v0 for every version, so a
    # client that does not yet know the broker's versions can always read it.
    API_KEY = 18
    API_VERSION = 3
    RESPONSE_TYPE = ApiVersionsResponse_v3
    SCHEMA = Schema(
        ("client_software_name", _str()),
        ("client_software_version", _str()),
        ("tags", TaggedFields),
    )



class ApiVersionsRequest_v4(ApiVersionsRequest_v3):
    API_VERSION = 4
    RESPONSE_TYPE = ApiVersionsResponse_v4


_ApiVersionsStruct: TypeAlias = ApiVersionsRequest_v3 | ApiVersionsRequest_v4


class ApiVersionsRequest(OwnRequest[_ApiVersionsStruct]):  # type: ignore[misc, unused-ignore]
    """ApiVersions v4 (or v3), whose response carries the finalized features.

    Send it on an established connection (aiokafka already negotiated versions
    with ApiVersions v0 when it connected).
    """

    API_KEY = 18

    def build(
        self,
        request_struct_class: type[_ApiVersionsStruct],
    ) -> _ApiVersionsStruct:
        return request_struct_class(_CLIENT_SOFTWARE_NAME, _CLIENT_SOFTWARE_VERSION, _tags())


@dataclass(frozen=True)
class BrokerApiVersions:
    """A decoded ApiVersions v3+ response.

    ``api_versions``: api key -> (min, max). ``supported_features``: name -> (min,
    max) this broker supports. ``finalized_features``: name -> (min level, max
    level) finalized for the cluster; valid only when ``finalized_features_epoch``
    is >= 0. A finalized feature that is absent is at level 0.
    """

    error_code: int
    api_versions: Mapping[int, tuple[int, int]]
    supported_features: Mapping[str, tuple[int, int]]
    finalized_features_epoch: int
    finalized_features: Mapping[str, tuple[int, int]]

    def finalized_level(self, feature: str) -> int:
        """The cluster's finalized (max) level of ``feature``; 0 when absent."""
        levels = self.finalized_features.get(feature)
        return 0 if levels is None else levels[1]


def _decode_tag(tags: Mapping[int, bytes], tag: int, decoder: Any) -> Any:
    value = tags.get(tag)
    if value is None:
        return None
    return decoder.decode(BytesIO(value))


def parse_api_versions(response: ApiVersionsResponse_v3) -> BrokerApiVersions:
    tags: Mapping[int, bytes] = response.get_item("tags") or {}
    supported: Sequence[Any] = _decode_tag(tags, _SUPPORTED_FEATURES_TAG, _SUPPORTED_FEATURES) or ()
    finalized: Sequence[Any] = _decode_tag(tags, _FINALIZED_FEATURES_TAG, _FINALIZED_FEATURES) or ()
    epoch = _decode_tag(tags, _FINALIZED_FEATURES_EPOCH_TAG, Int64)
    return BrokerApiVersions(
        error_code=int(response.get_item("error_code")),
        api_versions={
            int(key): (int(low), int(high))
            for key, low, high, _ in response.get_item("api_keys") or ()
        },
        supported_features={str(name): (int(low), int(high)) for name, low, high, _ in supported},
        finalized_features_epoch=-1 if epoch is None else int(epoch),
        finalized_features={str(name): (int(low), int(high)) for name, high, low, _ in finalized},
    )

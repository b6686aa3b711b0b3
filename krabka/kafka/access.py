"""Whether a principal holds the ACLs it needs, asked of the cluster before it is needed.

With an authorizer, a principal that lacks one ACL fails late and obscurely:
aiokafka retries a Metadata request that is refused, Faust logs a rebalance
loop, a role's first election ends in ``TransactionalIdAuthorizationFailed``.
`check_access` asks for each `Acl` at start-up with one request the broker
authorizes *before* it does anything else, and that changes nothing when
allowed (an empty Produce, a Fetch of at most one byte, a validate-only
CreateTopics, a Heartbeat of no member, AddPartitionsToTxn for no producer),
so a missing ACL is an `AccessDeniedError` naming it, the way
docs/guarantees.md#acls-a-member-needs writes it.

A prefixed ACL is asked about for one name under the prefix (`PROBE_SUFFIX`):
a literal grant of other names under it would not show.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import errors as _errors  # type: ignore[import-untyped, unused-ignore]
from aiokafka.client import AIOKafkaClient  # type: ignore[import-untyped, unused-ignore]
from aiokafka.protocol.admin import (  # type: ignore[import-untyped, unused-ignore]
    CreateTopicsRequest,
    DescribeConfigsRequest,
)
from aiokafka.protocol.coordination import (  # type: ignore[import-untyped, unused-ignore]
    FindCoordinatorRequest,
)
from aiokafka.protocol.fetch import FetchRequest  # type: ignore[import-untyped, unused-ignore]
from aiokafka.protocol.group import HeartbeatRequest  # type: ignore[import-untyped, unused-ignore]
from aiokafka.protocol.metadata import (  # type: ignore[import-untyped, unused-ignore]
    MetadataRequest,
)
from aiokafka.protocol.produce import (  # type: ignore[import-untyped, unused-ignore]
    ProduceRequest,
)
from aiokafka.protocol.transaction import (  # type: ignore[import-untyped, unused-ignore]
    AddPartitionsToTxnRequest,
)

from krabka.defaults import FENCING, TERMS_TOPIC
from krabka.errors import CoordinationError
from krabka.kafka.errors import KafkaUnavailableError, is_outage
from krabka.kafka.lifecycle import guard_bootstrap, start_bounded, stop_client
from krabka.kafka.options import ClientOptions
from krabka.options import check_fencing

__all__ = ["CLUSTER", "PROBE_SUFFIX", "AccessDeniedError", "Acl", "check_access",
           "member_acls"]

PROBE_SUFFIX = "__access-check"

# Kafka's enum codes (org.apache.kafka.common.resource / .acl), for CreateAcls.
RESOURCE_TYPES: Mapping[str, int] = {
    "Topic": 2, "Group": 3, "Cluster": 4, "TransactionalId": 5}
OPERATIONS: Mapping[str, int] = {
    "Read": 3, "Write": 4, "Create": 5, "Describe": 8, "DescribeConfigs": 10,
    "IdempotentWrite": 12}
LITERAL, PREFIXED = 3, 4
CLUSTER = "kafka-cluster"

_DENIED_CODES = {
    "Topic": _errors.TopicAuthorizationFailedError.errno,  # 29
    "Group": _errors.GroupAuthorizationFailedError.errno,  # 30
    "Cluster": _errors.ClusterAuthorizationFailedError.errno,  # 31
    "TransactionalId": _errors.TransactionalIdAuthorizationFailed.errno,  # 53
}
_BROKER_CONFIGS = 4  # DescribeConfigs resource type BROKER
_TOPIC_CONFIGS = 2
_TRANSACTION_KEY = 1  # FindCoordinator key type


@dataclass(frozen=True)
class Acl:
    """One ALLOW ACL: an operation on a resource (a name, or every name with a prefix)."""

    resource: str
    name: str
    operation: str
    prefixed: bool = False

    def __post_init__(self) -> None:
        if self.resource not in RESOURCE_TYPES:
            raise ValueError(f"unknown resource type {self.resource!r}")
        if self.operation not in OPERATIONS:
            raise ValueError(f"unknown operation {self.operation!r}")
        if (self.resource, self.operation) not in _PROBES:
            raise ValueError(f"no check for {self.operation} on a {self.resource}")

    def __str__(self) -> str:
        name = f"prefix `{self.name}`" if self.prefixed else f"`{self.name}`"
        return f"{self.resource} {name}: {self.operation}"

    def codes(self) -> tuple[int, str, int, int]:
        """Kafka's (resource type, name, pattern type, operation), as CreateAcls takes them."""
        return (RESOURCE_TYPES[self.resource], self.name, PREFIXED if self.prefixed else LITERAL,
                OPERATIONS[self.operation])

    @property
    def probe_name(self) -> str:
        """The resource name the check asks about."""
        return self.name + PROBE_SUFFIX if self.prefixed else self.name


class AccessDeniedError(CoordinationError):
    """The principal lacks ACLs it needs; `missing` lists them (docs/guarantees.md)."""

    def __init__(self, principal: str | None, missing: Sequence[Acl]) -> None:
        who = f"principal {principal!r}" if principal else "this principal"
        listed = "; ".join(str(acl) for acl in missing)
        super().__init__(f"{who} lacks the ACL(s) {listed} "
                         "(docs/guarantees.md#acls-a-member-needs)")
        self.principal = principal
        self.missing = tuple(missing)


def member_acls(topic: str, roles: Iterable[str], *, role_prefix: str | None = None,
                guarded_topics: Iterable[str] = (), fencing: str = FENCING,
                terms_topic: str = TERMS_TOPIC) -> list[Acl]:
    """The ACLs a member process needs (docs/guarantees.md#acls-a-member-needs).

    `roles` are those it is a candidate for, each its own transactional id,
    or every role under `role_prefix`; `guarded_topics` those it writes in
    guarded transactions. Describe is left out wherever Read or Write grants
    it (Kafka's implied operations): listing it would check nothing more.

    With ``fencing="term"`` the roles need no TransactionalId ACL (claims
    and heartbeats go to `terms_topic` through a plain idempotent producer,
    docs/term-mode.md): the terms topic's Read, Write and DescribeConfigs
    take their place, and `role_prefix` is not asked for; each guarded
    topic (a declared output) needs DescribeConfigs as well as Write, for
    the check that refuses a compacted output.
    """
    acls = [Acl("Topic", topic, op) for op in ("Read", "Write", "DescribeConfigs")]
    if check_fencing(fencing) == "term":
        acls += [Acl("Topic", terms_topic, op) for op in ("Read", "Write", "DescribeConfigs")]
    else:
        if role_prefix is not None:
            acls.append(Acl("TransactionalId", role_prefix, "Write", prefixed=True))
        acls += [Acl("TransactionalId", role, "Write") for role in sorted(set(roles))]
    writes = ("Write", "DescribeConfigs") if fencing == "term" else ("Write",)
    acls += [Acl("Topic", name, op) for name in guarded_topics for op in writes]
    acls.append(Acl("Cluster", CLUSTER, "DescribeConfigs"))
    return acls


def _probe_request(acl: Acl, topic: str) -> Any:
    """The request that the broker refuses exactly when `acl` is missing."""
    name = acl.probe_name
    return _PROBES[(acl.resource, acl.operation)](name, topic)


_PROBES: Mapping[tuple[str, str], Any] = {
    ("Topic", "Describe"): lambda name, _: MetadataRequest(
        [name], allow_auto_topic_creation=False),
    ("Topic", "Read"): lambda name, _: FetchRequest(0, 0, 1, 1, [(name, [(0, 0, 1)])]),
    # Authorized before the records are read: an empty set writes nothing
    # (the broker answers INVALID_RECORD when the principal may write).
    ("Topic", "Write"): lambda name, _: ProduceRequest(None, 1, 1000, [(name, [(0, b"")])]),
    ("Topic", "Create"): lambda name, _: CreateTopicsRequest(
        [(name, 1, 1, [], [])], 1000, True),
    ("Topic", "DescribeConfigs"): lambda name, _: DescribeConfigsRequest(
        [(_TOPIC_CONFIGS, name, None)]),
    ("Group", "Read"): lambda name, _: HeartbeatRequest(name, -1, ""),
    ("TransactionalId", "Describe"): lambda name, _: FindCoordinatorRequest(
        name, _TRANSACTION_KEY),
    # No producer id: allowed, the coordinator answers an error and adds nothing.
    ("TransactionalId", "Write"): lambda name, topic: AddPartitionsToTxnRequest(
        name, -1, -1, [(topic, [0])]),
    ("Cluster", "DescribeConfigs"): lambda _, __: DescribeConfigsRequest(
        [(_BROKER_CONFIGS, "", None)]),
}


def _error_codes(value: Any) -> Iterator[int]:
    """Every ``error_code`` anywhere in a decoded response."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if key == "error_code" and isinstance(item, int):
                yield item
            else:
                yield from _error_codes(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _error_codes(item)


async def check_access(
    bootstrap_servers: str | list[str],
    acls: Iterable[Acl],
    *,
    topic: str,
    principal: str | None = None,
    operation_timeout: float = 15.0,
    **aiokafka_options: Any,
) -> None:
    """Raise `AccessDeniedError` listing every one of `acls` the cluster refuses.

    `topic` is an existing topic the AddPartitionsToTxn check names (the
    state topic); `principal` only words the error. `aiokafka_options` are
    the connection's (``Connection.client_options()``). An unreachable
    cluster is a `KafkaUnavailableError`.
    """
    options = ClientOptions(bootstrap_servers, aiokafka_options)
    client = AIOKafkaClient(**options.client(), request_timeout_ms=int(operation_timeout * 1000))
    guard_bootstrap(client)
    servers = str(bootstrap_servers)
    missing = []
    try:
        await start_bounded(client.bootstrap(), operation_timeout, "the access check's client",
                            servers)
        node = client.get_random_node()
        for acl in acls:
            try:
                response = await client.send(node, _probe_request(acl, topic))
            except _errors.KafkaError as exc:
                if getattr(exc, "errno", None) == _DENIED_CODES[acl.resource]:
                    missing.append(acl)
                    continue
                raise KafkaUnavailableError(f"checking {acl} on {servers}: {exc!r}") from exc
            if _DENIED_CODES[acl.resource] in set(_error_codes(response.to_object())):
                missing.append(acl)
    except Exception as exc:
        if isinstance(exc, CoordinationError) or not is_outage(exc):
            raise
        raise KafkaUnavailableError(f"checking ACLs on {servers}: {exc!r}") from exc
    finally:
        await stop_client(client)
    if missing:
        raise AccessDeniedError(principal, missing)

"""Creating the coordination topics: the state topic and term mode's terms topic.

`ensure_topics` creates each topic that is missing with the settings the
start-up check (`krabka.topic_policy`) asks for, and holds each topic,
created or found, to that check: an existing topic is checked, never
changed, so a second call succeeds and a topic the protocol cannot run on is
the `StateTopicError` a member would meet at start-up. Both topics are
compacted with a short ``segment.ms`` (the cleaner only compacts closed
segments); the state topic keeps tombstones a day, for a lagging reader's
catch-up, and the terms topic 10 minutes (a reader that misses a settled
claim's tombstone keeps a claim no verdict depends on). With a replication
factor of 3 or more, ``min.insync.replicas`` is 2, so an acknowledged lease
is on two brokers.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from aiokafka import errors as _errors  # type: ignore[import-untyped, unused-ignore]
from aiokafka.admin import NewTopic  # type: ignore[import-untyped, unused-ignore]

from krabka.defaults import PARTITIONS, STATE_TOPIC, TERMS_TOPIC
from krabka.errors import StateTopicError
from krabka.kafka.access import AccessDeniedError, Acl
from krabka.kafka.admin import TopicChecker
from krabka.kafka.connection import Connection
from krabka.kafka.errors import KafkaTransportError, KafkaUnavailableError
from krabka.kafka.options import ClientOptions
from krabka.kafka.transport import KafkaTransport
from krabka.options import Fencing, check_fencing
from krabka.runtime.cancellation import bounded
from krabka.topic_policy import RECOMMENDED_MIN_ISR, RECOMMENDED_REPLICATION, StateTopicPolicy

__all__ = [
    "SEGMENT_MS",
    "STATE_DELETE_RETENTION_MS",
    "TERMS_DELETE_RETENTION_MS",
    "TopicOutcome",
    "ensure_topics",
    "topic_configs",
]

TopicOutcome = Literal["created", "exists"]
"""What `ensure_topics` did with one topic."""

SEGMENT_MS: Final = 60_000
"""The topics' segment.ms: a minute, so records are compacted soon after they are superseded."""

STATE_DELETE_RETENTION_MS: Final = 86_400_000
"""How long the state topic keeps a tombstone: a day, longer than any reader's catch-up."""

TERMS_DELETE_RETENTION_MS: Final = 600_000
"""How long the terms topic keeps a tombstone: a settled claim's decides nothing."""

LABELS: Final = {"state": "state topic", "terms": "terms topic"}

_TOPIC_EXISTS = _errors.TopicAlreadyExistsError.errno
_TOPIC_DENIED = _errors.TopicAuthorizationFailedError.errno
# The cluster refuses the topic as asked: these are the asker's to fix.
_REFUSED_AS_ASKED = frozenset({
    _errors.InvalidPartitionsError.errno,
    _errors.InvalidReplicationFactorError.errno,
    _errors.InvalidReplicationAssignmentError.errno,
    _errors.InvalidConfigurationError.errno,
    _errors.InvalidTopicError.errno,
    _errors.PolicyViolationError.errno,
})


def topic_configs(kind: Literal["state", "terms"], replication_factor: int,
                  segment_ms: int = SEGMENT_MS) -> dict[str, str]:
    """The configs `ensure_topics` creates the state or terms topic with."""
    configs = {"cleanup.policy": "compact", "segment.ms": str(segment_ms),
               "delete.retention.ms": str(STATE_DELETE_RETENTION_MS if kind == "state"
                                          else TERMS_DELETE_RETENTION_MS)}
    if replication_factor >= RECOMMENDED_REPLICATION:
        configs["min.insync.replicas"] = str(RECOMMENDED_MIN_ISR)
    return configs


async def ensure_topics(
    cluster: KafkaTransport | Connection,
    *,
    fencing: Fencing | str = "epoch",
    partitions: int = PARTITIONS,
    replication_factor: int | None = None,
    segment_ms: int = SEGMENT_MS,
    topic: str | None = None,
    terms_topic: str | None = None,
    time_limit: float = 30.0,
) -> dict[str, TopicOutcome]:
    """Create the state topic (and with ``fencing="term"`` the terms topic) if missing.

    `cluster` is reached as it says: a `KafkaTransport` with its options and
    topic names, or a `Connection` (TLS and SASL included) with the default
    names. `topic` and `terms_topic` override the names. Each topic has
    `partitions` partitions and `replication_factor` replicas (default: 3,
    or the number of brokers if the cluster has fewer). Returns what was
    done with each topic, by name.

    A topic that exists is not changed, only checked as a member's start-up
    check would check it: the `StateTopicError` of a topic that is not
    exactly compacted, or has another partition count. The cluster refusing
    to create a topic as asked (too few brokers for the replication factor,
    a config it rejects) is a `StateTopicError` naming why; a principal
    without Create on a missing topic an `AccessDeniedError`. The whole call
    takes at most `time_limit` seconds (`KafkaUnavailableError` after).
    """
    mode = check_fencing(fencing)
    if partitions < 1:
        raise ValueError(f"partitions must be at least 1, got {partitions}")
    if replication_factor is not None and replication_factor < 1:
        raise ValueError(f"replication_factor must be at least 1, got {replication_factor}")
    if segment_ms < 1:
        raise ValueError(f"segment_ms must be positive, got {segment_ms}")
    if not time_limit > 0:
        raise ValueError(f"time_limit must be positive, got {time_limit}")
    options, servers, names = _target(cluster)
    wanted: list[tuple[Literal["state", "terms"], str]] = [
        ("state", topic if topic is not None else names[0])]
    if mode == "term":
        wanted.append(("terms", terms_topic if terms_topic is not None else names[1]))
    for _, name in wanted:
        if not name.strip():
            raise ValueError("a topic name must not be empty")
    checker = TopicChecker(options, timeout=time_limit, servers=servers, cache_seconds=0.0)
    try:
        return await bounded(_ensure(checker, wanted, partitions, replication_factor,
                                     segment_ms, servers), time_limit)
    except TimeoutError as exc:
        raise KafkaUnavailableError(
            f"creating the coordination topics: no answer from the Kafka cluster at "
            f"{servers} within {time_limit:g} s") from exc
    finally:
        await checker.close()


def _target(cluster: KafkaTransport | Connection) -> tuple[ClientOptions, str, tuple[str, str]]:
    """The client options, the servers' text and the (state, terms) topic names."""
    if isinstance(cluster, KafkaTransport):
        return (cluster.client_options, cluster.servers,
                (cluster.topic, cluster.terms_topic))
    options = ClientOptions(cluster.bootstrap_servers, cluster.client_options())
    return options, cluster.bootstrap_servers, (STATE_TOPIC, TERMS_TOPIC)


async def _ensure(checker: TopicChecker, wanted: list[tuple[Literal["state", "terms"], str]],
                  partitions: int, replication_factor: int | None, segment_ms: int,
                  servers: str) -> dict[str, TopicOutcome]:
    admin = await checker.admin_client()
    try:
        if replication_factor is None:
            brokers = (await admin.describe_cluster())["brokers"]
            replication_factor = max(1, min(RECOMMENDED_REPLICATION, len(brokers)))
        done: dict[str, TopicOutcome] = {}
        for kind, name in wanted:
            done[name] = await _create(admin, kind, name, partitions, replication_factor,
                                       segment_ms, servers)
            # Created or found, the topic passes the start-up check or is refused by it.
            StateTopicPolicy(LABELS[kind]).check(await checker.facts(name), partitions, None)
        return done
    except _errors.KafkaConnectionError as exc:
        raise KafkaUnavailableError(
            f"creating the coordination topics: lost the Kafka cluster at {servers} ({exc})"
        ) from exc
    except _errors.KafkaError as exc:
        raise KafkaTransportError(
            f"creating the coordination topics on {servers} failed: {exc!r}") from exc


async def _create(admin: Any, kind: Literal["state", "terms"], name: str, partitions: int,
                  replication_factor: int, segment_ms: int, servers: str) -> TopicOutcome:
    response = await admin.create_topics([NewTopic(
        name, partitions, replication_factor,
        topic_configs=topic_configs(kind, replication_factor, segment_ms))])
    # CreateTopics answers each topic with an error code; aiokafka raises none of them.
    (answer,) = response.to_object()["topic_errors"]
    code, message = answer["error_code"], answer.get("error_message")
    if code == 0:
        return "created"
    if code == _TOPIC_EXISTS:
        return "exists"
    if code == _TOPIC_DENIED:
        raise AccessDeniedError(None, [Acl("Topic", name, "Create")])
    error = _errors.for_code(code)
    if code in _REFUSED_AS_ASKED:
        raise StateTopicError(
            f"the cluster at {servers} refused to create the {LABELS[kind]} {name!r} with "
            f"{partitions} partitions and replication factor {replication_factor}: "
            f"{error.__name__}" + (f" ({message})" if message else ""))
    raise KafkaTransportError(
        f"creating the {LABELS[kind]} {name!r} on {servers} failed: {error.__name__}"
        + (f" ({message})" if message else ""))

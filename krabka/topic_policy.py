"""The state-topic policy: what the topic and its brokers must be for the protocol.

Transports only report `TopicFacts`; `StateTopicPolicy.check` applies the
rules, so `KafkaTransport` and `MemoryTransport` refuse the same topics with
the same messages.

Four conditions refuse to run (`StateTopicError`, each message naming the
fix): the topic is missing; its ``cleanup.policy`` is not exactly
``compact``; its real partition count differs from the configured one (two
counts would split a role's records across two partitions); the lease is
longer than the brokers' ``transaction.max.timeout.ms`` (InitProducerId
would answer 50). A replication factor below 3, ``min.insync.replicas``
below 2 and a long ``segment.ms`` only warn: they cost durability or
compaction, not correctness. So does an abort cleanup interval that is not
well below the lease: it slows failover after a holder dies inside a
transaction.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from krabka.defaults import PARTITIONS
from krabka.errors import StateTopicError

__all__ = [
    "KAFKA_ABORT_CLEANUP_INTERVAL_MS",
    "KAFKA_MIN_INSYNC_REPLICAS",
    "KAFKA_SEGMENT_MS",
    "KAFKA_TRANSACTION_MAX_TIMEOUT_MS",
    "StateTopicPolicy",
    "TopicCheck",
    "TopicFacts",
    "require_topic",
]

log = logging.getLogger("krabka.topic")

# Kafka's defaults: what a broker or topic that does not set them has.
KAFKA_TRANSACTION_MAX_TIMEOUT_MS = 900_000
KAFKA_ABORT_CLEANUP_INTERVAL_MS = 10_000
KAFKA_MIN_INSYNC_REPLICAS = 1
KAFKA_SEGMENT_MS = 604_800_000

RECOMMENDED_REPLICATION = 3
RECOMMENDED_MIN_ISR = 2
LONG_SEGMENT_MS = 3_600_000
# "Well below the lease": at most a third of it.
ABORT_INTERVAL_SHARE = 3
ABORT_INTERVAL = "transaction.abort.timed.out.transaction.cleanup.interval.ms"


@dataclass(frozen=True, slots=True)
class TopicCheck:
    """What a passed topic check learned that the protocol's timing depends on.

    `abort_cleanup_interval_ms` is the brokers' (largest)
    ``transaction.abort.timed.out.transaction.cleanup.interval.ms``: a
    transaction that outlived its timeout stays open, hiding its partition's
    tail from read_committed readers, until the next cleanup pass.
    """

    abort_cleanup_interval_ms: int


@dataclass(frozen=True, slots=True)
class TopicFacts:
    """What the cluster says of the state topic and its brokers.

    `servers` is the cluster's address as the fix commands in the refusals
    name it. For a topic that does not exist only `topic`, `servers` and
    `exists` mean anything. `transaction_max_timeout_ms` is the smallest of
    the brokers' values and `abort_cleanup_interval_ms` the largest: the
    protocol must fit every broker that can become a coordinator.
    """

    topic: str
    servers: str
    exists: bool
    partitions: int = 0
    cleanup_policy: str | None = None
    replication: int = 0
    min_insync_replicas: int = KAFKA_MIN_INSYNC_REPLICAS
    segment_ms: int = KAFKA_SEGMENT_MS
    transaction_max_timeout_ms: int = KAFKA_TRANSACTION_MAX_TIMEOUT_MS
    abort_cleanup_interval_ms: int = KAFKA_ABORT_CLEANUP_INTERVAL_MS


def require_topic(facts: TopicFacts, label: str = "state topic") -> None:
    """`StateTopicError` naming how to create the topic, if it does not exist.

    `label` is "state topic" or "terms topic" (term mode's, which takes the
    state topic's partition count).
    """
    if facts.exists:
        return
    servers, topic = facts.servers, facts.topic
    flag = "--topic" if label == "state topic" else "--fencing term --terms-topic"
    raise StateTopicError(
        f"the {label} {topic!r} does not exist: create it, with cleanup.policy=compact and "
        "the partition count every member is configured with, by running "
        f"krabka create-topics --bootstrap-servers {servers} {flag} {topic} "
        f"--partitions {PARTITIONS} (and the members' connection settings)"
    )


class StateTopicPolicy:
    """Applies the policy to one transport's facts; logs each warning once.

    A transport keeps one per topic, so every `acquire_leadership` on it can
    afford the check without repeating the warnings. `label` names the topic
    in the messages: "state topic", or "terms topic" for term mode's.
    """

    def __init__(self, label: str = "state topic") -> None:
        self.label = label
        self._warned = False
        self._warned_leases: set[int] = set()

    def check(
        self, facts: TopicFacts, partitions: int | None, lease_duration: float | None
    ) -> TopicCheck:
        """Refuse a topic or broker the protocol cannot run on (`StateTopicError`).

        `partitions` None skips the count check, `lease_duration` None the
        lease checks (a reader holds no lease).
        """
        require_topic(facts, self.label)
        label = self.label
        topic, servers = facts.topic, facts.servers
        if facts.cleanup_policy != "compact":
            raise StateTopicError(
                f"the {label} {topic!r} has cleanup.policy="
                f"{facts.cleanup_policy!r}; it must be exactly 'compact' "
                f"(kafka-configs.sh --bootstrap-server {servers} --alter --entity-type "
                f"topics --entity-name {topic} --add-config cleanup.policy=compact)"
            )
        if partitions is not None and facts.partitions != partitions:
            raise StateTopicError(
                f"the {label} {topic!r} has {facts.partitions} partitions, but "
                f"this member is configured with partitions={partitions}: configure every "
                f"member with partitions={facts.partitions} (the real count; changing a "
                f"{label}'s partition count moves roles between partitions)"
            )
        if lease_duration is not None:
            lease_ms = round(lease_duration * 1000)
            if lease_ms > facts.transaction_max_timeout_ms:
                raise StateTopicError(
                    f"the lease duration ({lease_duration:g} s) is longer than the brokers' "
                    f"transaction.max.timeout.ms ({facts.transaction_max_timeout_ms} ms): "
                    "shorten the lease or raise transaction.max.timeout.ms on every broker"
                )
        self._warn_once(facts)
        if lease_duration is not None:
            self._warn_abort_interval(facts, round(lease_duration * 1000))
        return TopicCheck(facts.abort_cleanup_interval_ms)

    def _warn_once(self, facts: TopicFacts) -> None:
        if self._warned:
            return
        self._warned = True
        topic, label = facts.topic, self.label
        if facts.replication < RECOMMENDED_REPLICATION:
            log.warning("the %s %r has replication factor %d; use %d so leases "
                        "survive the loss of a broker", label, topic, facts.replication,
                        RECOMMENDED_REPLICATION)
        if facts.min_insync_replicas < RECOMMENDED_MIN_ISR:
            log.warning("the %s %r has min.insync.replicas=%d; use %d so an "
                        "acknowledged lease is on two brokers", label, topic,
                        facts.min_insync_replicas, RECOMMENDED_MIN_ISR)
        if facts.segment_ms > LONG_SEGMENT_MS:
            log.warning("the %s %r has segment.ms=%d; compaction only cleans closed "
                        "segments, so set a short segment.ms (e.g. 600000)", label, topic,
                        facts.segment_ms)

    def _warn_abort_interval(self, facts: TopicFacts, lease_ms: int) -> None:
        """Warn once per lease when the broker's abort cleanup is slow against it.

        A holder that dies inside a transaction hides its partition's tail
        until the coordinator aborts that transaction: its timeout (the
        lease) plus up to one cleanup interval. Standbys of every role on the
        partition hold their challenges that long, so failover slows by the
        interval.
        """
        interval = facts.abort_cleanup_interval_ms
        if interval * ABORT_INTERVAL_SHARE <= lease_ms or lease_ms in self._warned_leases:
            return
        self._warned_leases.add(lease_ms)
        log.warning("the brokers' %s is %d ms, not well below the lease (%d ms): after a "
                    "holder dies inside a transaction, standbys on its partition wait up to "
                    "the lease plus %d ms; set it to about 1000 on every broker",
                    ABORT_INTERVAL, interval, lease_ms, interval)

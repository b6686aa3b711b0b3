"""The start-up check of the state topic and the broker.

The rule is item 7 of docs/design.md#the-kafka-adapter.

Four conditions refuse to run, each with a message naming the fix: the topic
is missing; its ``cleanup.policy`` is not exactly ``compact``; its real
partition count differs from the configured one (two counts would split a
role's records across two partitions); the lease is longer than the brokers'
``transaction.max.timeout.ms`` (InitProducerId would answer 50). A replication
factor below 3, ``min.insync.replicas`` below 2 and a long ``segment.ms`` only
warn: they cost durability or compaction, not correctness.

The metadata request is sent with topic auto-creation off: the check must not
create the topic it is checking with the broker's defaults. What the cluster
says is cached for `cache_seconds`, so every `acquire_leadership` and
`describe_role_state` can afford the check, and a changed topic is noticed
within that time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from aiokafka import errors as _errors  # type: ignore[import-untyped, unused-ignore]
from aiokafka.admin import AIOKafkaAdminClient  # type: ignore[import-untyped, unused-ignore]
from aiokafka.admin.config_resource import (  # type: ignore[import-untyped, unused-ignore]
    ConfigResource,
    ConfigResourceType,
)
from aiokafka.protocol.metadata import (  # type: ignore[import-untyped, unused-ignore]
    MetadataRequest,
)

from coordination.errors import StateTopicError
from coordination.kafka.errors import KafkaTransportError, KafkaUnavailableError
from coordination.kafka.lifecycle import start_bounded, stop_admin
from coordination.kafka.options import ClientOptions

__all__ = ["TopicChecker", "TopicFacts"]

log = logging.getLogger("coordination.kafka")

UNKNOWN_TOPIC_OR_PARTITION = 3
RECOMMENDED_REPLICATION = 3
RECOMMENDED_MIN_ISR = 2
LONG_SEGMENT_MS = 3_600_000
MISSING_GRACE = 1.0
TOPIC_CONFIGS = ("cleanup.policy", "min.insync.replicas", "segment.ms")
MAX_TIMEOUT = "transaction.max.timeout.ms"
ABORT_INTERVAL = "transaction.abort.timed.out.transaction.cleanup.interval.ms"
DEFAULT_ABORT_INTERVAL_MS = 10_000  # Kafka's default
# "Well below the lease": at most a third of it.
ABORT_INTERVAL_SHARE = 3


@dataclass(frozen=True, slots=True)
class TopicFacts:
    """What the cluster says of the state topic and its brokers."""

    partitions: int
    replication: int
    configs: dict[str, str]
    transaction_max_timeout_ms: int
    abort_cleanup_interval_ms: int


class TopicChecker:
    """Checks the state topic with an admin client; caches what it learns."""

    def __init__(
        self,
        options: ClientOptions,
        topic: str,
        *,
        timeout: float,
        servers: str,
        cache_seconds: float = 30.0,
    ) -> None:
        self._options = options
        self._topic = topic
        self._timeout = timeout
        self._servers = servers
        self._cache_seconds = cache_seconds
        self._admin: Any = None
        self._facts: TopicFacts | None = None
        self._fetched_at = 0.0
        self._lock = asyncio.Lock()
        self._warned = False
        self._warned_leases: set[int] = set()

    async def check(self, partitions: int | None, lease_duration: float | None) -> TopicFacts:
        """Refuse a topic or broker the protocol cannot run on (`StateTopicError`)."""
        facts = await self.facts()
        if facts.configs.get("cleanup.policy") != "compact":
            raise StateTopicError(
                f"the state topic {self._topic!r} has cleanup.policy="
                f"{facts.configs.get('cleanup.policy')!r}; it must be exactly 'compact' "
                f"(kafka-configs.sh --bootstrap-server {self._servers} --alter --entity-type "
                f"topics --entity-name {self._topic} --add-config cleanup.policy=compact)"
            )
        if partitions is not None and facts.partitions != partitions:
            raise StateTopicError(
                f"the state topic {self._topic!r} has {facts.partitions} partitions, but "
                f"this member is configured with partitions={partitions}: configure every "
                f"member with partitions={facts.partitions} (the real count; changing a "
                "state topic's partition count moves roles between partitions)"
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
        return facts

    async def facts(self) -> TopicFacts:
        """The topic's facts, from the cache while it is fresh."""
        async with self._lock:
            now = time.monotonic()
            if self._facts is None or now - self._fetched_at > self._cache_seconds:
                self._facts = await self._fetch()
                self._fetched_at = time.monotonic()
            return self._facts

    async def close(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            await stop_admin(admin)

    def _missing(self) -> StateTopicError:
        return StateTopicError(
            f"the state topic {self._topic!r} does not exist: create it with "
            "cleanup.policy=compact and the partition count every member is configured "
            f"with: python deploy/topics.py --bootstrap-servers {self._servers} "
            f"--state-topic {self._topic} --partitions 16 (from this project's checkout), or "
            f"kafka-topics.sh --bootstrap-server {self._servers} --create --topic "
            f"{self._topic} --partitions 16 --replication-factor 3 --config "
            "cleanup.policy=compact --config min.insync.replicas=2 --config segment.ms=60000"
        )

    async def _client(self) -> Any:
        if self._admin is None:
            admin = AIOKafkaAdminClient(**self._options.admin())
            try:
                await start_bounded(admin.start(), self._timeout,
                                    "checking the state topic", self._servers)
            except BaseException:
                await stop_admin(admin)
                raise
            self._admin = admin
        return self._admin

    async def _fetch(self) -> TopicFacts:
        try:
            return await asyncio.wait_for(self._describe(), self._timeout)
        except TimeoutError as exc:
            raise KafkaUnavailableError(
                f"checking the state topic {self._topic!r}: no answer from the Kafka cluster "
                f"at {self._servers} within {self._timeout:g} s"
            ) from exc
        except _errors.KafkaError as exc:
            raise KafkaTransportError(
                f"checking the state topic {self._topic!r} on {self._servers} failed: {exc!r}"
            ) from exc

    async def _describe(self) -> TopicFacts:
        admin = await self._client()
        metadata, topic = await self._metadata(admin)
        if topic["error_code"]:
            raise _errors.for_code(topic["error_code"])(f"metadata of {self._topic}")
        brokers = [broker["node_id"] for broker in metadata["brokers"]]
        resources = [ConfigResource(ConfigResourceType.TOPIC, self._topic,
                                    dict.fromkeys(TOPIC_CONFIGS))]
        resources += [ConfigResource(ConfigResourceType.BROKER, str(node),
                                     {MAX_TIMEOUT: None, ABORT_INTERVAL: None})
                      for node in brokers]
        configs: dict[str, str] = {}
        max_timeouts: list[int] = []
        abort_intervals: list[int] = []
        for response in await admin.describe_configs(resources):
            for resource in response.to_object()["resources"]:
                if resource["error_code"] == UNKNOWN_TOPIC_OR_PARTITION:
                    raise self._missing()
                if resource["error_code"]:
                    raise _errors.for_code(resource["error_code"])(
                        resource["error_message"] or resource["resource_name"])
                entries = {e["config_names"]: e["config_value"]
                           for e in resource["config_entries"]}
                if resource["resource_type"] == ConfigResourceType.TOPIC:
                    configs = entries
                else:
                    if MAX_TIMEOUT in entries:
                        max_timeouts.append(int(entries[MAX_TIMEOUT]))
                    if ABORT_INTERVAL in entries:
                        abort_intervals.append(int(entries[ABORT_INTERVAL]))
        partitions = topic["partitions"]
        return TopicFacts(
            partitions=len(partitions),
            replication=min((len(p["replicas"]) for p in partitions), default=0),
            configs=configs,
            transaction_max_timeout_ms=min(max_timeouts, default=900_000),
            abort_cleanup_interval_ms=max(abort_intervals, default=DEFAULT_ABORT_INTERVAL_MS),
        )

    async def _metadata(self, admin: Any) -> tuple[Any, Any]:
        """The cluster's metadata and the topic's entry; `StateTopicError` if it is missing.

        A topic created a moment ago can be unknown to a broker for a few
        milliseconds (it learns of it from the metadata log), so "unknown" is
        asked again for `MISSING_GRACE` seconds before it is believed.
        """
        give_up = time.monotonic() + MISSING_GRACE
        while True:
            # Auto-creation off: the check must never create the topic it checks.
            metadata = (await admin._send_request(
                MetadataRequest([self._topic], allow_auto_topic_creation=False)
            )).to_object()
            (topic,) = metadata["topics"]
            if topic["error_code"] != UNKNOWN_TOPIC_OR_PARTITION:
                return metadata, topic
            if time.monotonic() >= give_up:
                raise self._missing()
            await asyncio.sleep(0.1)

    def _warn_once(self, facts: TopicFacts) -> None:
        if self._warned:
            return
        self._warned = True
        topic = self._topic
        if facts.replication < RECOMMENDED_REPLICATION:
            log.warning("the state topic %r has replication factor %d; use %d so leases "
                        "survive the loss of a broker", topic, facts.replication,
                        RECOMMENDED_REPLICATION)
        min_isr = int(facts.configs.get("min.insync.replicas", "1"))
        if min_isr < RECOMMENDED_MIN_ISR:
            log.warning("the state topic %r has min.insync.replicas=%d; use %d so an "
                        "acknowledged lease is on two brokers", topic, min_isr,
                        RECOMMENDED_MIN_ISR)
        segment_ms = int(facts.configs.get("segment.ms", "604800000"))
        if segment_ms > LONG_SEGMENT_MS:
            log.warning("the state topic %r has segment.ms=%d; compaction only cleans closed "
                        "segments, so set a short segment.ms (e.g. 600000)", topic, segment_ms)

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

"""The facts of the coordination topics and their brokers, as an admin client reads them.

`TopicChecker` reports `TopicFacts` of any topic it is asked about (the
state topic, term mode's terms topic); `krabka.topic_policy` decides
what they allow. `partition_count` answers how many partitions a topic has
(a term-mode leader's outputs). Metadata requests are sent with topic
auto-creation off: a check must not create the topic it is checking with the
broker's defaults. What the cluster says of an existing topic is cached for
`cache_seconds`, so every `acquire_leadership` and `describe_role_state` can
afford the check, and a changed topic is noticed within that time; a missing
topic is asked about again each time, so one created a moment later is
found. One admin client serves every topic.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

from aiokafka import errors as _errors  # type: ignore[import-untyped, unused-ignore]
from aiokafka.admin import AIOKafkaAdminClient  # type: ignore[import-untyped, unused-ignore]
from aiokafka.admin.config_resource import (  # type: ignore[import-untyped, unused-ignore]
    ConfigResource,
    ConfigResourceType,
)
from aiokafka.protocol.metadata import (  # type: ignore[import-untyped, unused-ignore]
    MetadataRequest,
)

from krabka.kafka.aiokafka_internals import admin_network_client, admin_send
from krabka.kafka.errors import KafkaTransportError, KafkaUnavailableError
from krabka.kafka.lifecycle import guard_bootstrap, start_bounded, stop_admin
from krabka.kafka.options import ClientOptions
from krabka.runtime.cancellation import bounded
from krabka.topic_policy import (
    KAFKA_ABORT_CLEANUP_INTERVAL_MS,
    KAFKA_MIN_INSYNC_REPLICAS,
    KAFKA_SEGMENT_MS,
    KAFKA_TRANSACTION_MAX_TIMEOUT_MS,
    TopicFacts,
)

__all__ = ["TopicChecker"]

T = TypeVar("T")


UNKNOWN_TOPIC_OR_PARTITION = 3
MISSING_GRACE = 1.0
TOPIC_CONFIGS = ("cleanup.policy", "min.insync.replicas", "segment.ms")
MAX_TIMEOUT = "transaction.max.timeout.ms"
ABORT_INTERVAL = "transaction.abort.timed.out.transaction.cleanup.interval.ms"


class TopicChecker:
    """Reads topics' facts with one admin client; caches what it learns, per topic."""

    def __init__(
        self,
        options: ClientOptions,
        *,
        timeout: float,
        servers: str,
        cache_seconds: float,
    ) -> None:
        self._options = options
        self._timeout = timeout
        self._servers = servers
        self._cache_seconds = cache_seconds
        self._admin: Any = None
        self._admin_lock = asyncio.Lock()
        # topic -> (facts, when fetched); a lock per topic, so a slow topic
        # does not hold up the check of another.
        self._facts: dict[str, tuple[TopicFacts, float]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def facts(self, topic: str) -> TopicFacts:
        """`topic`'s facts, from the cache while fresh (a missing topic is not cached)."""
        async with self._locks.setdefault(topic, asyncio.Lock()):
            cached = self._facts.get(topic)
            if cached is None or time.monotonic() - cached[1] > self._cache_seconds:
                facts = await self._fetch(topic)
                if not facts.exists:
                    return facts
                cached = (facts, time.monotonic())
                self._facts[topic] = cached
            return cached[0]

    async def partition_count(self, topic: str) -> int | None:
        """How many partitions `topic` has now (never cached); None if it does not exist."""
        return await self._bounded(self._count(topic), f"the metadata of {topic!r}")

    async def _count(self, topic: str) -> int | None:
        found = await self._metadata(await self._client(), topic)
        if found is None:
            return None
        return len(found[1]["partitions"])

    async def admin_client(self) -> Any:
        """The started admin client the facts are read with (started on first use).

        `krabka.kafka.topics` creates topics with it, so creating and checking
        a topic share one connection and one bound on starting it.
        """
        return await self._client()

    async def close(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            await stop_admin(admin)

    def _missing(self, topic: str) -> TopicFacts:
        return TopicFacts(topic, self._servers, exists=False)

    async def _client(self) -> Any:
        async with self._admin_lock:
            if self._admin is None:
                admin = AIOKafkaAdminClient(**self._options.admin())
                guard_bootstrap(admin_network_client(admin))
                try:
                    await start_bounded(admin.start(), self._timeout,
                                        "starting the admin client", self._servers)
                except BaseException:
                    await stop_admin(admin)
                    raise
                self._admin = admin
            return self._admin

    async def _fetch(self, topic: str) -> TopicFacts:
        return await self._bounded(self._describe(topic), f"checking the topic {topic!r}")

    async def _bounded(self, request: Awaitable[T], what: str) -> T:
        """`request` within the timeout; a failure of Kafka is a `KafkaTransportError`."""
        try:
            return await bounded(request, self._timeout)
        except TimeoutError as exc:
            raise KafkaUnavailableError(
                f"{what}: no answer from the Kafka cluster "
                f"at {self._servers} within {self._timeout:g} s"
            ) from exc
        except _errors.KafkaError as exc:
            raise KafkaTransportError(f"{what} on {self._servers} failed: {exc!r}") from exc

    async def _describe(self, name: str) -> TopicFacts:
        admin = await self._client()
        found = await self._metadata(admin, name)
        if found is None:
            return self._missing(name)
        metadata, topic = found
        brokers = [broker["node_id"] for broker in metadata["brokers"]]
        resources = [ConfigResource(ConfigResourceType.TOPIC, name,
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
                    return self._missing(name)
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
            name,
            self._servers,
            exists=True,
            partitions=len(partitions),
            cleanup_policy=configs.get("cleanup.policy"),
            replication=min((len(p["replicas"]) for p in partitions), default=0),
            min_insync_replicas=int(configs.get("min.insync.replicas",
                                                KAFKA_MIN_INSYNC_REPLICAS)),
            segment_ms=int(configs.get("segment.ms", KAFKA_SEGMENT_MS)),
            transaction_max_timeout_ms=min(max_timeouts,
                                           default=KAFKA_TRANSACTION_MAX_TIMEOUT_MS),
            abort_cleanup_interval_ms=max(abort_intervals,
                                          default=KAFKA_ABORT_CLEANUP_INTERVAL_MS),
        )

    async def _metadata(self, admin: Any, name: str) -> tuple[Any, Any] | None:
        """The cluster's metadata and the topic's entry; None if the topic is missing.

        Any other error of the topic's entry is raised (as aiokafka's class).

        A topic created a moment ago can be unknown to a broker for a few
        milliseconds (it learns of it from the metadata log), so "unknown" is
        asked again for `MISSING_GRACE` seconds before it is believed.
        """
        give_up = time.monotonic() + MISSING_GRACE
        while True:
            # Auto-creation off: the check must never create the topic it checks.
            metadata = (await admin_send(
                admin, MetadataRequest([name], allow_auto_topic_creation=False)
            )).to_object()
            (topic,) = metadata["topics"]
            if topic["error_code"] != UNKNOWN_TOPIC_OR_PARTITION:
                if topic["error_code"]:
                    raise _errors.for_code(topic["error_code"])(f"metadata of {name}")
                return metadata, topic
            if time.monotonic() >= give_up:
                return None
            await asyncio.sleep(0.1)

"""The facts of the state topic and its brokers, as an admin client reads them.

`TopicChecker` reports `TopicFacts`; `coordination.topic_policy` decides
what they allow. The metadata request is sent with topic auto-creation off:
the check must not create the topic it is checking with the broker's
defaults. What the cluster says of an existing topic is cached for
`cache_seconds`, so every `acquire_leadership` and `describe_role_state` can
afford the check, and a changed topic is noticed within that time; a missing
topic is asked about again each time, so one created a moment later is
found.
"""

from __future__ import annotations

import asyncio
import time
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

from coordination.kafka.errors import KafkaTransportError, KafkaUnavailableError
from coordination.kafka.lifecycle import start_bounded, stop_admin
from coordination.kafka.options import ClientOptions
from coordination.topic_policy import (
    KAFKA_ABORT_CLEANUP_INTERVAL_MS,
    KAFKA_MIN_INSYNC_REPLICAS,
    KAFKA_SEGMENT_MS,
    KAFKA_TRANSACTION_MAX_TIMEOUT_MS,
    TopicFacts,
)

__all__ = ["TopicChecker"]


UNKNOWN_TOPIC_OR_PARTITION = 3
MISSING_GRACE = 1.0
TOPIC_CONFIGS = ("cleanup.policy", "min.insync.replicas", "segment.ms")
MAX_TIMEOUT = "transaction.max.timeout.ms"
ABORT_INTERVAL = "transaction.abort.timed.out.transaction.cleanup.interval.ms"


class TopicChecker:
    """Reads the state topic's facts with an admin client; caches what it learns."""

    def __init__(
        self,
        options: ClientOptions,
        topic: str,
        *,
        timeout: float,
        servers: str,
        cache_seconds: float,
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

    async def facts(self) -> TopicFacts:
        """The topic's facts, from the cache while it is fresh (a missing topic is not cached)."""
        async with self._lock:
            now = time.monotonic()
            if self._facts is None or now - self._fetched_at > self._cache_seconds:
                facts = await self._fetch()
                if not facts.exists:
                    return facts
                self._facts = facts
                self._fetched_at = time.monotonic()
            return self._facts

    async def close(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            await stop_admin(admin)

    def _missing(self) -> TopicFacts:
        return TopicFacts(self._topic, self._servers, exists=False)

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
        found = await self._metadata(admin)
        if found is None:
            return self._missing()
        metadata, topic = found
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
                    return self._missing()
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
            self._topic,
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

    async def _metadata(self, admin: Any) -> tuple[Any, Any] | None:
        """The cluster's metadata and the topic's entry; None if the topic is missing.

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
                return None
            await asyncio.sleep(0.1)

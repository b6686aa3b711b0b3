"""One cluster, two backends: what the transport contract suite runs against.

A backend is a cluster with a fresh state topic and a fresh terms topic (term
mode's, with the state topic's partition count). `process()` opens another
client process on it (a transport with its own producers, so two of them can
fence each other); `records()` is what a plain consumer of a partition reads,
headers included; `eventually()` polls a condition while time passes, which
on the real broker is the wall clock and in memory is a `ManualClock` moved
in steps (the broker's cleaner runs at each step on the topics created
with `eager_compaction`, as Kafka's does within seconds on such topics).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from krabka.kafka import KafkaTransport
from krabka.testing import ManualClock, MemoryBroker, MemoryTransport
from krabka.testing.memory import MemoryRecord
from tests.faults.broken_brokers import BROKEN_BROKERS
from tests.support import polling
from tests.support.kafka_io import read_committed

__all__ = [
    "BROKER_VARIABLE",
    "DEADLINE",
    "KafkaBackend",
    "MemoryBackend",
    "StoredRecord",
    "memory_broker_class",
]

T = TypeVar("T")

PARTITIONS = 4
DEADLINE = 30.0
"""Seconds (wall clock, or the memory cluster's clock) a condition may take."""

BROKER_VARIABLE = "TRANSPORT_CONTRACT_BROKER"
"""Names a broken `MemoryBroker` of tests.faults.broken_brokers for the memory backend."""

# The cleaner may compact a segment as soon as it is closed: segments close
# after 200 ms (at the next append), tombstones go 500 ms after a cleaning.
EAGER_COMPACTION = {"segment.ms": "200", "min.cleanable.dirty.ratio": "0.01",
                    "delete.retention.ms": "500", "min.compaction.lag.ms": "0"}
# Long segments: nothing of a test's records is compacted while it runs.
NO_COMPACTION = {"segment.ms": "600000"}

MEMORY_STEP_MS = 50
# As the test broker (deploy/kafka/kafka.py) is configured.
MEMORY_ABORT_CLEANUP_INTERVAL = 1.0


StoredRecord = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]]]
"""(offset, key, value, headers) of a record as a consumer reads it."""


def memory_broker_class() -> type[MemoryBroker]:
    """`MemoryBroker`, or the broken variant `TRANSPORT_CONTRACT_BROKER` names."""
    name = os.environ.get(BROKER_VARIABLE)
    if not name:
        return MemoryBroker
    try:
        return BROKEN_BROKERS[name]
    except KeyError:
        raise ValueError(f"{BROKER_VARIABLE}={name!r} is none of {sorted(BROKEN_BROKERS)}"
                         ) from None


class MemoryBackend:
    """A `MemoryBroker` on a `ManualClock`."""

    name = "memory"

    def __init__(self) -> None:
        self.clock = ManualClock()
        self.broker = memory_broker_class()(
            clock=self.clock, abort_cleanup_interval=MEMORY_ABORT_CLEANUP_INTERVAL)
        self.partitions = PARTITIONS
        self._topics = 0
        self._eager: list[str] = []
        self.state_topic = ""
        self.terms_topic = ""

    async def start(self) -> None:
        self.state_topic = await self.new_topic()
        self.terms_topic = await self.new_topic()

    async def new_topic(self, partitions: int = PARTITIONS, *, compacted: bool = True,
                        eager_compaction: bool = False) -> str:
        self._topics += 1
        name = f"topic-{self._topics}"
        self.broker.create_topic(name, partitions, compacted=compacted)
        if eager_compaction:
            self._eager.append(name)
        return name

    async def process(self, topic: str | None = None,
                      terms_topic: str | None = None) -> MemoryTransport:
        return MemoryTransport(self.broker, topic=topic or self.state_topic,
                               terms_topic=terms_topic or self.terms_topic)

    async def records(self, topic: str, partition: int) -> list[StoredRecord]:
        return [_stored(r) for r in self.broker.records(topic, partition)]

    def now_ms(self) -> int:
        """The clients' wall clock."""
        return self.clock.now_ms()

    async def eventually(self, probe: Callable[[], Awaitable[T]], done: Callable[[T], bool],
                         within: float = DEADLINE) -> T:
        deadline = self.clock.now_ms() + round(within * 1000)
        while True:
            result = await probe()
            if done(result):
                return result
            assert self.clock.now_ms() < deadline, f"still {result!r} after {within} s"
            self.clock.advance_ms(MEMORY_STEP_MS)
            for topic in self._eager:
                self.broker.compact(topic)

    async def close(self) -> None:
        return None


class KafkaBackend:
    """The real broker of the test session; each backend has its own topics."""

    name = "kafka"

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.partitions = PARTITIONS
        self.state_topic = ""
        self.terms_topic = ""
        self._admin: Any = None
        self._opened: list[KafkaTransport] = []

    async def start(self) -> None:
        self._admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        await self._admin.start()
        self.state_topic = await self.new_topic()
        self.terms_topic = await self.new_topic()

    async def new_topic(self, partitions: int = PARTITIONS, *, compacted: bool = True,
                        eager_compaction: bool = False) -> str:
        name = f"contract-{uuid.uuid4().hex[:10]}"
        configs: dict[str, Any] = {}
        if compacted:
            configs = {"cleanup.policy": "compact",
                       **(EAGER_COMPACTION if eager_compaction else NO_COMPACTION)}
        response = await self._admin.create_topics(
            [NewTopic(name, partitions, 1, topic_configs=configs)])
        assert [error for _, error, _ in response.topic_errors] == [0]
        return name

    async def process(self, topic: str | None = None,
                      terms_topic: str | None = None) -> KafkaTransport:
        transport = KafkaTransport(self.bootstrap, topic=topic or self.state_topic,
                                   terms_topic=terms_topic or self.terms_topic)
        await transport.__aenter__()
        self._opened.append(transport)
        return transport

    async def records(self, topic: str, partition: int) -> list[StoredRecord]:
        return [(r.offset, r.key, r.value, list(r.headers))
                for r in await read_committed(self.bootstrap, topic, partition)]

    def now_ms(self) -> int:
        """The clients' wall clock."""
        return time.time_ns() // 1_000_000

    async def eventually(self, probe: Callable[[], Awaitable[T]], done: Callable[[T], bool],
                         within: float = DEADLINE) -> T:
        return await polling.eventually(probe, done, within)

    async def close(self) -> None:
        for transport in self._opened:
            await transport.close()
        await self._admin.close()


def _stored(record: MemoryRecord) -> StoredRecord:
    return (record.offset, record.key, record.value, list(record.headers))

"""A role producer's client can start from what its transport knows, and the
transport asks for that knowledge once for many roles.

`SharedMetadata` is driven with a fake request and a hand-moved clock (how
callers at the same time share one request is `SingleFlight`'s, tested on
its own); `start_seeded` is applied to a real aiokafka producer that never
connects.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.client import CoordinationType
from aiokafka.protocol.metadata import MetadataResponse_v1
from aiokafka.structs import TopicPartition

from krabka.kafka.producer.seeded import Seed, SharedMetadata, start_seeded
from tests.support.loop import run_ready_callbacks

TOPIC = "state"


class Asked:
    """A Metadata request that answers when the test says so."""

    def __init__(self) -> None:
        self.topics: list[list[str]] = []
        self.answer: asyncio.Future[Any] | None = None

    async def __call__(self, topics: Any) -> Any:
        self.topics.append(list(topics))
        self.answer = asyncio.get_running_loop().create_future()
        return await self.answer


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def started(task: asyncio.Task[Any]) -> None:
    await run_ready_callbacks()
    assert not task.done()


async def test_an_answer_is_reused_until_it_is_max_age_old_then_asked_again():
    asked, clock = Asked(), Clock()
    shared = SharedMetadata(asked, max_age=5.0, monotonic=clock)
    first = asyncio.ensure_future(shared.get(TOPIC))
    await started(first)
    assert asked.answer is not None
    assert asked.topics == [[TOPIC]]
    asked.answer.set_result("first")
    assert await first == "first"
    clock.now += 4.9
    assert await shared.get(TOPIC) == "first"
    assert len(asked.topics) == 1
    clock.now += 0.1
    again = asyncio.ensure_future(shared.get(TOPIC))
    await started(again)
    asked.answer.set_result("second")
    assert await again == "second"
    assert len(asked.topics) == 2


async def test_a_seeded_producer_knows_the_brokers_the_topic_and_its_coordinator_without_asking():
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1", transactional_id="role",
                                enable_idempotence=True, acks="all")
    metadata = MetadataResponse_v1(
        [(7, "broker-7", 9092, None)], 7,
        [(0, TOPIC, False, [(0, 0, 7, [7], [7]), (0, 1, 7, [7], [7])])])
    try:
        start_seeded(producer, Seed(metadata, frozenset({TOPIC}), coordinator=7))
        client = producer.client
        assert client.cluster.partitions_for_topic(TOPIC) == {0, 1}
        assert client.cluster.leader_for_partition(TopicPartition(TOPIC, 1)) == 7
        assert await producer._sender._find_coordinator(CoordinationType.TRANSACTION,
                                                        "role") == 7
        # Tracking the topic already, the client asks for no metadata when told to.
        assert client.set_topics([TOPIC]).done()
        assert client._sync_task is not None
        assert not client._sync_task.done()
    finally:
        await producer.client.close()


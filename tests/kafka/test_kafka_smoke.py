"""The local broker is a real Kafka: a compacted topic, a record at role_partition."""

import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from krabka.format.partition import role_partition
from krabka.format.records import encode_key, lease_key

pytestmark = pytest.mark.integration


async def test_a_record_written_at_role_partition_is_read_back_from_that_partition(
    kafka_bootstrap,
):
    topic = f"smoke-{uuid.uuid4().hex[:8]}"
    role = "billing-scheduler"
    partition = role_partition(role, 16)
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(topic, 16, 1, topic_configs={"cleanup.policy": "compact"})]
        )
    finally:
        await admin.close()

    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        key = encode_key(lease_key(role))
        sent = await producer.send_and_wait(topic, b"value", key=key, partition=partition)
    finally:
        await producer.stop()
    assert sent.partition == partition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=kafka_bootstrap, isolation_level="read_committed",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        batch = await consumer.getmany(tp, timeout_ms=10_000)
    finally:
        await consumer.stop()
    records = batch.get(tp, [])
    assert [(r.key, r.value) for r in records] == [(key, b"value")]

"""Small real-Kafka chores shared by the integration tests."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import ConsumerRecord

from krabka import TermFilter, describe_leadership, describe_role_state
from krabka.format.partition import role_partition
from krabka.format.terms import TERM_HEADER, TermStamp, decode_term_header
from krabka.kafka import KafkaTransport
from krabka.kafka.options import ClientOptions
from krabka.kafka.producer.coordinators import TransactionCoordinators
from krabka.rules.state import RoleState
from krabka.term.fold import TermView, build_term_view
from tests.support.polling import eventually

SETTLE_WITHIN = 10.0
"""Seconds a role's acknowledged commit may take to become readable."""


def terms_topic_of(state_topic: str) -> str:
    """The terms topic `create_state_and_output_topics` made beside `state_topic`."""
    return state_topic.replace("state-", "terms-", 1)


async def compacted_state_and_terms_topics(bootstrap: str, partitions: int) -> tuple[str, str]:
    """A fresh state topic and terms topic of `partitions` partitions, both compacted."""
    suffix = uuid.uuid4().hex[:8]
    state, terms = f"state-{suffix}", f"terms-{suffix}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1,
                                            topic_configs={"cleanup.policy": "compact"})
                                   for name in (state, terms)])
    finally:
        await admin.close()
    return state, terms


async def create_state_and_output_topics(
    bootstrap: str,
    partitions: int,
    *,
    replication: int = 1,
    state_configs: dict[str, str] | None = None,
) -> tuple[str, str]:
    """A fresh compacted state topic with `partitions` and a one-partition output topic.

    Term mode's terms topic comes with it, named `terms_topic_of(state)`, with
    the state topic's partition count and settings.
    """
    suffix = uuid.uuid4().hex[:8]
    state, output = f"state-{suffix}", f"output-{suffix}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        configs = {"cleanup.policy": "compact", **(state_configs or {})}
        await admin.create_topics([
            NewTopic(state, partitions, replication, topic_configs=configs),
            NewTopic(terms_topic_of(state), partitions, replication, topic_configs=configs),
            NewTopic(output, 1, replication),
        ])
    finally:
        await admin.close()
    return state, output


async def settled_role_state(transport: KafkaTransport, role: str,
                             partitions: int) -> RoleState:
    """The role's state once its last transaction is complete.

    EndTxn is answered when the coordinator has logged PrepareCommit; the
    commit markers, and with them the records' visibility to read_committed
    readers, follow a few milliseconds later. A read straight after a
    hand-back can therefore still show the lease its tombstone replaces.
    """
    await eventually(lambda: describe_leadership(transport, role),
                     lambda status: not status.state.startswith("Prepare"), SETTLE_WITHIN)
    return await describe_role_state(transport, role, partitions)


async def read_committed(bootstrap: str, topic: str, partition: int = 0) -> list[ConsumerRecord]:
    """Every record a read_committed consumer sees in one partition, up to its end now."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                                enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        records: list[ConsumerRecord] = []
        while await consumer.position(tp) < end:
            batch = await consumer.getmany(tp, timeout_ms=1000)
            records.extend(batch.get(tp, []))
        return records
    finally:
        await consumer.stop()


async def committed_values(bootstrap: str, topic: str) -> list[bytes]:
    """The values of partition 0 of `topic` that read_committed consumers see."""
    return [record.value for record in await read_committed(bootstrap, topic)]


def stamp_of(record: ConsumerRecord) -> TermStamp:
    """A term-mode leader's record's ``krabka.term`` header, decoded."""
    [stamp] = [value for name, value in record.headers if name == TERM_HEADER]
    assert stamp is not None, record
    return decode_term_header(stamp)


async def term_filtered(
    bootstrap: str, topic: str, partition: int = 0
) -> list[tuple[ConsumerRecord, str]]:
    """Every record of one partition with the verdict of a fresh `TermFilter` that
    knows `topic` is term-fenced, as a plain consumer applying it in offset order sees."""
    term_filter = TermFilter(fenced_topics=[topic])
    return [(record, term_filter.admit(topic, partition, record.headers))
            for record in await read_committed(bootstrap, topic, partition)]


async def terms_view(bootstrap: str, state_topic: str, role: str, partitions: int) -> TermView:
    """The role's `TermView` folded from its partition of the terms topic beside `state_topic`."""
    async with KafkaTransport(bootstrap, topic=state_topic,
                              terms_topic=terms_topic_of(state_topic)) as transport:
        read = await transport.read_terms(role_partition(role, partitions))
    return build_term_view(role, read.records)


async def transactional_id_error(bootstrap: str, role: str) -> int:
    """The error code DescribeTransactions answers for the transactional id `role`
    (TRANSACTIONAL_ID_NOT_FOUND when no InitProducerId ever named it)."""
    coordinators = TransactionCoordinators(ClientOptions(bootstrap, {}), timeout=30,
                                           servers=bootstrap)
    try:
        return (await coordinators.describe(role)).error_code
    finally:
        await coordinators.close()


def failing_fetches(transport: KafkaTransport, error: BaseException,
                    monkeypatch: pytest.MonkeyPatch) -> list[BaseException]:
    """The tails' consumer raises `error` from its next fetch, once; the list
    holds it once raised."""
    consumer = transport._hub._consumer
    fetch = consumer.getmany
    raised: list[BaseException] = []

    async def getmany(*args: Any, **kwargs: Any) -> Any:
        if not raised:
            raised.append(error)
            raise error
        return await fetch(*args, **kwargs)

    monkeypatch.setattr(consumer, "getmany", getmany)
    return raised

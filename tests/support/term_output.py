"""A term-mode leader's output on the real broker, with a zombie's pen, for reader tests."""

from __future__ import annotations

import contextlib
import uuid

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic, RecordsToDelete

from krabka import acquire_leadership
from krabka.format.terms import TERM_HEADER, TermStamp, encode_term_header
from krabka.kafka import KafkaTransport, KafkaTransportError
from krabka.term.tenure import TermLeadership
from tests.support.kafka_io import create_state_and_output_topics, terms_topic_of
from tests.support.polling import eventually

PARTITIONS = 4
OUTPUT_PARTITIONS = 2
TIMING = {"lease_duration": 3.0, "renew_interval": 1.0, "challenge_stagger": 0.5}
WITHIN = 20.0


class Setting:
    """One test's topics, its leaders' transports, and the zombie's pen."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.role = f"test.term-reader-{uuid.uuid4().hex[:8]}"
        self.opened: list[KafkaTransport] = []

    async def setup(self) -> None:
        self.state, _ = await create_state_and_output_topics(self.bootstrap, PARTITIONS)
        self.terms = terms_topic_of(self.state)
        self.output = f"term-output-{uuid.uuid4().hex[:8]}"
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(self.output, OUTPUT_PARTITIONS, 1)])
        finally:
            await admin.close()
        # Created on the controller; the brokers' metadata lists it a moment later.
        probe = await self.transport()

        async def count() -> int | None:
            with contextlib.suppress(KafkaTransportError):
                return await probe.output_partitions(self.output)
            return None

        await eventually(count, lambda found: found == OUTPUT_PARTITIONS, WITHIN)

    async def transport(self) -> KafkaTransport:
        transport = KafkaTransport(self.bootstrap, topic=self.state, terms_topic=self.terms)
        self.opened.append(transport)
        return transport

    async def lead(self, member: str) -> TermLeadership:
        leadership = await acquire_leadership(
            await self.transport(), self.role, member, partitions=PARTITIONS,
            fencing="term", outputs=[self.output], **TIMING)
        assert isinstance(leadership, TermLeadership)
        await eventually(lambda: self.barriers(leadership.term),
                         lambda found: found == set(range(OUTPUT_PARTITIONS)), WITHIN)
        return leadership

    async def write(self, leader: TermLeadership, value: bytes, partition: int = 0) -> None:
        async with leader.transaction() as txn:
            await txn.send(self.output, value, partition=partition)

    async def zombie_write(self, term: int, value: bytes, partition: int = 0) -> None:
        """A record stamped with `term`, as a deposed leader that has not noticed writes it."""
        stamp = encode_term_header(TermStamp(self.role, term))
        writer = await self.transport()
        await writer.write_output(self.output, partition, None, value, [(TERM_HEADER, stamp)])

    async def barriers(self, term: int) -> set[int]:
        """The output partitions that have the role's barrier of `term`."""
        return {record.partition for record in await self.read_all()
                if (TERM_HEADER, encode_term_header(TermStamp(self.role, term, barrier=True)))
                in record.headers}

    async def read_all(self) -> list:
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            tps = [TopicPartition(self.output, p) for p in range(OUTPUT_PARTITIONS)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            ends = await consumer.end_offsets(tps)
            records: list = []
            while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
                for batch in (await consumer.getmany(timeout_ms=500)).values():
                    records.extend(batch)
            return records
        finally:
            await consumer.stop()

    async def ends(self) -> dict[TopicPartition, int]:
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap)
        await consumer.start()
        try:
            return await consumer.end_offsets(
                [TopicPartition(self.output, p) for p in range(OUTPUT_PARTITIONS)])
        finally:
            await consumer.stop()

    async def delete_below(self, offsets: dict[TopicPartition, int]) -> None:
        """Delete every record of the output below `offsets` (DeleteRecords, as retention)."""
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        await admin.start()
        try:
            await admin.delete_records({tp: RecordsToDelete(offset)
                                        for tp, offset in offsets.items()})
        finally:
            await admin.close()

    async def close(self) -> None:
        for transport in self.opened:
            await transport.close()

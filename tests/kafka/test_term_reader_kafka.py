"""Readers of a term-mode leader's output on the real broker (docs/term-mode.md#the-filter).

A term-mode leader writes stamped records and barriers; after a successor's
barrier, a zombie (a writer still stamping the old term) writes through
`KafkaTransport.write_output`, which the broker accepts. The plain aiokafka
example reader (examples/term_reader/consumer.py) drops the zombie's
records, commits its marks with its offsets, and after a restart resumes
with them; a reader with no saved marks mid-log cannot tell the zombie's
records from current ones; a reader that starts at the end is seeded from
the terms topic and drops them too.
"""

from __future__ import annotations

import contextlib
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from coordination import (
    TERM_HEADER,
    FormatError,
    TermFilter,
    TermLeadership,
    TermStamp,
    acquire_leadership,
    encode_term_header,
)
from coordination.kafka import (
    KafkaTransport,
    KafkaTransportError,
    MarksTooLargeError,
    commit_marks,
    resume,
)
from examples.term_reader.consumer import FencedReader
from tests.support.kafka_io import create_state_and_output_topics, terms_topic_of
from tests.support.polling import eventually

pytestmark = pytest.mark.integration

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

    def reader(self, group: str) -> FencedReader:
        return FencedReader(self.bootstrap, self.output, group, roles=[self.role],
                            terms_topic=self.terms)

    async def close(self) -> None:
        for transport in self.opened:
            await transport.close()


@pytest.fixture
async def setting(kafka_bootstrap):
    setting = Setting(kafka_bootstrap)
    await setting.setup()
    yield setting
    await setting.close()


async def read_to_end(setting: Setting, reader: FencedReader) -> list[bytes]:
    """The values `reader` admits up to the output's end now."""
    ends = await setting.ends()
    admitted: list[bytes] = []

    async def step() -> dict[TopicPartition, int]:
        admitted.extend(record.value for record in await reader.batch(timeout_ms=200))
        return reader.positions

    await eventually(step, lambda at: all(at[tp] >= end for tp, end in ends.items()), WITHIN)
    return admitted


async def test_the_example_reader_drops_a_zombie_and_still_does_after_a_restart(setting):
    group = f"reader-{uuid.uuid4().hex[:8]}"
    async with setting.reader(group) as reader:
        assert {start.kind for start in reader.started.values()} == {"end"}
        first = await setting.lead("a")
        await setting.write(first, b"a-1")
        assert await read_to_end(setting, reader) == [b"a-1"]
        await first.resign()
        second = await setting.lead("b")
        assert second.term == first.term + 1
        await setting.zombie_write(first.term, b"zombie-1")
        await setting.write(second, b"b-1")
        assert await read_to_end(setting, reader) == [b"b-1"]
        assert reader.filter.dropped == {"stale": 1}
        await reader.commit()
    # Restarted: a new process, a new filter; only the committed metadata carries the marks.
    await setting.zombie_write(first.term, b"zombie-2")
    await setting.zombie_write(first.term, b"zombie-3", partition=1)
    await setting.write(second, b"b-2")
    async with setting.reader(group) as restarted:
        assert {start.kind for start in restarted.started.values()} == {"restored"}
        assert await read_to_end(setting, restarted) == [b"b-2"]
        assert restarted.filter.dropped == {"stale": 2}
    await second.resign()


async def test_mid_log_without_saved_marks_a_zombie_looks_current_unless_seeded(setting):
    first = await setting.lead("a")
    await setting.write(first, b"a-1")
    await first.resign()
    second = await setting.lead("b")
    await setting.write(second, b"b-1")
    # A group that committed offsets past the new barrier, without marks.
    group = f"plain-{uuid.uuid4().hex[:8]}"
    ends = await setting.ends()
    plain = AIOKafkaConsumer(bootstrap_servers=setting.bootstrap, group_id=group,
                             enable_auto_commit=False)
    await plain.start()
    try:
        plain.assign(list(ends))
        await plain.commit(ends)
    finally:
        await plain.stop()
    await setting.zombie_write(first.term, b"zombie")
    await setting.write(second, b"b-2")
    after = [r for r in await setting.read_all() if r.offset >= ends[TopicPartition(
        setting.output, r.partition)]]
    # A filter with no marks, from there: the zombie's term-1 record passes
    # exactly as a-1, a legitimate record of term 1, passed before the barrier.
    blank = TermFilter(fenced_topics=[setting.output])
    verdicts = {r.value: blank.admit(r.topic, r.partition, r.headers) for r in after}
    assert verdicts == {b"zombie": "pass", b"b-2": "pass"}
    # The example resumes that group seeded from the terms topic: it fails closed.
    async with setting.reader(group) as reader:
        assert {start.kind for start in reader.started.values()} == {"seeded"}
        assert await read_to_end(setting, reader) == [b"b-2"]
        assert reader.filter.dropped == {"stale": 1}
    await second.resign()


async def test_a_reader_that_starts_at_the_end_is_seeded_and_drops_a_zombie(setting):
    first = await setting.lead("a")
    await setting.write(first, b"a-1")
    await first.resign()
    second = await setting.lead("b")
    group = f"late-{uuid.uuid4().hex[:8]}"
    async with setting.reader(group) as reader:
        assert {start.kind for start in reader.started.values()} == {"end"}
        assert all(reader.filter.mark(setting.output, p, setting.role) == second.term
                   for p in range(OUTPUT_PARTITIONS))
        # Partition 1 has had nothing but barriers: the seed is all this reader knows.
        await setting.zombie_write(first.term, b"zombie", partition=1)
        await setting.write(second, b"b-1", partition=1)
        assert await read_to_end(setting, reader) == [b"b-1"]
        assert reader.filter.dropped == {"stale": 1}
    await second.resign()


async def test_committed_metadata_that_is_not_marks_is_a_format_error(setting):
    group = f"foreign-{uuid.uuid4().hex[:8]}"
    tp = TopicPartition(setting.output, 0)
    consumer = AIOKafkaConsumer(bootstrap_servers=setting.bootstrap, group_id=group,
                                enable_auto_commit=False)
    admin = AIOKafkaAdminClient(bootstrap_servers=setting.bootstrap)
    transport = await setting.transport()
    await consumer.start()
    await admin.start()
    try:
        consumer.assign([tp])
        await consumer.commit({tp: (0, "written by another tool")})
        with pytest.raises(FormatError, match=f"group '{group}' committed metadata"):
            await resume(consumer, admin, group, TermFilter(), transport, [tp])
    finally:
        await consumer.stop()
        await admin.close()


async def test_marks_the_broker_refuses_are_a_typed_error_and_nothing_is_committed(setting):
    group = f"large-{uuid.uuid4().hex[:8]}"
    tp = TopicPartition(setting.output, 0)
    reader = TermFilter()
    for n in range(200):  # about 5,300 bytes of metadata: over the broker's 4096
        reader.seed(setting.output, 0, f"role-{n:05d}", 1)
    consumer = AIOKafkaConsumer(bootstrap_servers=setting.bootstrap, group_id=group,
                                enable_auto_commit=False)
    admin = AIOKafkaAdminClient(bootstrap_servers=setting.bootstrap)
    await consumer.start()
    await admin.start()
    try:
        consumer.assign([tp])
        # A caller that believes the broker allows more: the broker's refusal is typed too.
        with pytest.raises(MarksTooLargeError, match="broker refused"):
            await commit_marks(consumer, reader, {tp: 0}, max_bytes=1 << 20)
        committed = await admin.list_consumer_group_offsets(group, partitions=[tp])
        assert tp not in committed or committed[tp].offset == -1
    finally:
        await consumer.stop()
        await admin.close()

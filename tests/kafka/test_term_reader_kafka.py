"""Readers of a term-mode leader's output on the real broker (docs/term-mode.md#the-filter).

A term-mode leader writes stamped records and barriers; after a successor's
barrier, a zombie (a writer still stamping the old term) writes through
`KafkaTransport.write_output`, which the broker accepts. The plain aiokafka
example reader (examples/term_reader/consumer.py) drops the zombie's
records, commits its marks with its offsets, and after a restart resumes
with them; a reader with no saved marks mid-log cannot tell the zombie's
records from current ones; a reader that starts at the end is seeded from
the terms topic and drops them too; a reader whose committed offset was
deleted (DeleteRecords, as retention does) resumes at the log start, seeded.
"""

from __future__ import annotations

import uuid

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from examples.term_reader.consumer import FencedReader
from krabka import FormatError, TermFilter
from krabka.kafka import MarksTooLargeError, commit_marks, resume
from tests.support.polling import eventually
from tests.support.term_output import OUTPUT_PARTITIONS, WITHIN, Setting

pytestmark = pytest.mark.integration

def reader_of(setting: Setting, group: str) -> FencedReader:
    return FencedReader(setting.bootstrap, setting.output, group, roles=[setting.role],
                        terms_topic=setting.terms)


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
    async with reader_of(setting, group) as reader:
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
    async with reader_of(setting, group) as restarted:
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
    async with reader_of(setting, group) as reader:
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
    async with reader_of(setting, group) as reader:
        assert {start.kind for start in reader.started.values()} == {"end"}
        assert all(reader.filter.mark(setting.output, p, setting.role) == second.term
                   for p in range(OUTPUT_PARTITIONS))
        # Partition 1 has had nothing but barriers: the seed is all this reader knows.
        await setting.zombie_write(first.term, b"zombie", partition=1)
        await setting.write(second, b"b-1", partition=1)
        assert await read_to_end(setting, reader) == [b"b-1"]
        assert reader.filter.dropped == {"stale": 1}
    await second.resign()


async def test_a_committed_offset_below_the_log_start_resumes_there_seeded(setting):
    group = f"retained-{uuid.uuid4().hex[:8]}"
    first = await setting.lead("a")
    async with reader_of(setting, group) as reader:
        await setting.write(first, b"a-1")
        assert await read_to_end(setting, reader) == [b"a-1"]
        await reader.commit()  # its marks: the first term, on both partitions
    await first.resign()
    second = await setting.lead("b")
    # The successor's barriers, then the records after them, are deleted up to
    # the zombie's record: the restarted reader never reads the barrier.
    ends = await setting.ends()
    await setting.zombie_write(first.term, b"zombie")
    await setting.write(second, b"b-1")
    await setting.delete_below(ends)
    async with reader_of(setting, group) as restarted:
        assert await read_to_end(setting, restarted) == [b"b-1"]
        assert restarted.filter.dropped == {"stale": 1}
        assert {tp: start.kind for tp, start in restarted.started.items()} == {
            tp: "truncated" for tp in ends}
        assert {tp: start.offset for tp, start in restarted.started.items()} == ends
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

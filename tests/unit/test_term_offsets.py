"""The size rule of marks committed as offset-commit metadata
(docs/term-mode.md#saved-marks): checked before anything is sent. The commit
itself and the resume are tested against the real broker in
tests/kafka/test_term_reader_kafka.py."""

from __future__ import annotations

import pytest
from aiokafka import TopicPartition

from krabka import TermFilter
from krabka.kafka import (
    OFFSET_METADATA_MAX_BYTES,
    MarksTooLargeError,
    commit_marks,
    marks_metadata,
)


def filter_with_roles(count: int, topic: str = "out", partition: int = 0) -> TermFilter:
    reader = TermFilter()
    for n in range(count):
        reader.seed(topic, partition, f"role-{n:05d}", n + 1)
    return reader


def largest_fitting(max_bytes: int) -> int:
    """How many roles' marks fit in `max_bytes` of metadata, found by adding one at a time."""
    count = 0
    while len(filter_with_roles(count + 1).save_text("out", 0)) <= max_bytes:
        count += 1
    return count


class RecordingConsumer:
    """Stands in for an aiokafka consumer: records what it was asked to commit."""

    def __init__(self) -> None:
        self.commits: list[dict[TopicPartition, tuple[int, str]]] = []

    async def commit(self, offsets: dict[TopicPartition, tuple[int, str]]) -> None:
        self.commits.append(offsets)


def test_marks_up_to_the_default_limit_are_metadata_that_restores_them():
    fits = largest_fitting(OFFSET_METADATA_MAX_BYTES)
    reader = filter_with_roles(fits)
    text = marks_metadata(reader, "out", 0)
    assert len(text) <= OFFSET_METADATA_MAX_BYTES
    restored = TermFilter()
    restored.restore_text("out", 0, text)
    assert restored.mark("out", 0, f"role-{fits - 1:05d}") == fits


def test_marks_over_the_limit_are_a_typed_error_naming_the_partition_and_size():
    reader = filter_with_roles(largest_fitting(OFFSET_METADATA_MAX_BYTES) + 1)
    with pytest.raises(MarksTooLargeError, match=r"out partition 0 take \d+ bytes.*4096"):
        marks_metadata(reader, "out", 0)


def test_a_lower_broker_limit_is_honoured_when_passed():
    reader = filter_with_roles(3)
    size = len(reader.save_text("out", 0))
    assert marks_metadata(reader, "out", 0, max_bytes=size)
    with pytest.raises(MarksTooLargeError):
        marks_metadata(reader, "out", 0, max_bytes=size - 1)


async def test_nothing_is_committed_when_one_partitions_marks_are_too_large():
    reader = filter_with_roles(largest_fitting(OFFSET_METADATA_MAX_BYTES) + 1, partition=1)
    reader.seed("out", 0, "small", 1)
    consumer = RecordingConsumer()
    with pytest.raises(MarksTooLargeError, match="partition 1"):
        await commit_marks(consumer, reader, {TopicPartition("out", 0): 10,
                                              TopicPartition("out", 1): 10})
    assert consumer.commits == []


async def test_each_partition_is_committed_with_its_own_marks():
    reader = TermFilter()
    reader.seed("out", 0, "billing", 2)
    reader.seed("out", 1, "billing", 3)
    consumer = RecordingConsumer()
    offsets = {TopicPartition("out", 0): 5, TopicPartition("out", 1): 7}
    await commit_marks(consumer, reader, offsets)
    assert consumer.commits == [{
        TopicPartition("out", 0): (5, reader.save_text("out", 0)),
        TopicPartition("out", 1): (7, reader.save_text("out", 1)),
    }]

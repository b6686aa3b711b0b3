"""A term-mode hand-over under load on the real broker: no old-term record
passes a reader's filter once the successor's function has started.

The old leader writes without pause to two output topics, its records to the
second one reaching the broker late (a slow link: what it handed to its
producer lands whatever becomes of its function). The successor's barriers
on that topic are slow too. The successor's function starts only once its
barrier is on every declared partition, and the old leader resigns only once
its sends are answered, so every old-term record a `TermFilter` admits
precedes the successor's start on its partition.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from krabka import LeaderRunner, Leadership, LeadershipOptions, TermFilter
from krabka.format.terms import TERM_HEADER, decode_term_header
from krabka.kafka import KafkaTransport, KafkaTransportError
from tests.support.kafka_io import create_state_and_output_topics, terms_topic_of
from tests.support.polling import eventually

pytestmark = pytest.mark.integration

PARTITIONS = 4
OUTPUT_PARTITIONS = 2
WITHIN = 30.0


class SlowLink(KafkaTransport):
    """A client whose output records to some topics reach the broker late.

    `record_delay` and `barrier_delay` map a topic to seconds. The delay is
    the fault under test, not a synchronisation: the record is handed over at
    once, and lands after the delay even when its sender is cancelled.
    """

    def __init__(self, *args, record_delay: dict[str, float] | None = None,
                 barrier_delay: dict[str, float] | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.record_delay = record_delay or {}
        self.barrier_delay = barrier_delay or {}
        self.in_flight: set[asyncio.Future[int]] = set()

    async def write_output(self, topic, partition, key, value, headers):
        barrier = decode_term_header(dict(headers)[TERM_HEADER]).barrier
        delay = (self.barrier_delay if barrier else self.record_delay).get(topic, 0.0)
        landing = asyncio.ensure_future(self._land(delay, topic, partition, key, value, headers))
        self.in_flight.add(landing)
        landing.add_done_callback(self.in_flight.discard)
        return await asyncio.shield(landing)

    async def _land(self, delay, topic, partition, key, value, headers) -> int:
        await asyncio.sleep(delay)
        return await super().write_output(topic, partition, key, value, headers)


async def create_outputs(bootstrap: str, names: list[str], probe: KafkaTransport) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, OUTPUT_PARTITIONS, 1) for name in names])
    finally:
        await admin.close()
    for name in names:  # listed by the brokers' metadata a moment after the controller

        async def count(topic: str = name) -> int | None:
            with contextlib.suppress(KafkaTransportError):
                return await probe.output_partitions(topic)
            return None

        await eventually(count, lambda found: found == OUTPUT_PARTITIONS, WITHIN)


async def read_all(bootstrap: str, tps: list[TopicPartition]) -> dict[TopicPartition, list]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        records: dict[TopicPartition, list] = {tp: [] for tp in tps}
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            for tp, batch in (await consumer.getmany(timeout_ms=500)).items():
                records[tp].extend(batch)
        return records
    finally:
        await consumer.stop()


async def test_a_term_handover_under_load_admits_no_old_term_record_after_the_successor_started(
        kafka_bootstrap):
    state, _ = await create_state_and_output_topics(kafka_bootstrap, PARTITIONS)
    terms = terms_topic_of(state)
    suffix = uuid.uuid4().hex[:8]
    first, second = f"handover-first-{suffix}", f"handover-second-{suffix}"
    tps = [TopicPartition(topic, p) for topic in (first, second)
           for p in range(OUTPUT_PARTITIONS)]
    role = f"test.handover-{suffix}"
    options = LeadershipOptions(partitions=PARTITIONS, lease_duration=3.0, renew_interval=1.0,
                                challenge_stagger=0.5, fencing="term", outputs=(first, second))
    old_link = SlowLink(kafka_bootstrap, topic=state, terms_topic=terms,
                        record_delay={second: 1.0})
    new_link = SlowLink(kafka_bootstrap, topic=state, terms_topic=terms,
                        barrier_delay={second: 1.5})
    ends_consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap)
    started: dict[str, dict[TopicPartition, int]] = {}
    sent: dict[str, int] = {"a": 0, "b": 0}

    def function(member: str):
        async def work(leadership: Leadership) -> None:
            if member == "b":
                started[member] = await ends_consumer.end_offsets(tps)
            else:
                started[member] = {}
            count = 0
            while True:
                async with leadership.transaction() as txn:
                    for _ in range(5):
                        await txn.send(first, f"{member}-{count}".encode(),
                                       partition=count % OUTPUT_PARTITIONS)
                    await txn.send(second, f"{member}-{count}".encode(),
                                   partition=count % OUTPUT_PARTITIONS)
                count += 1
                sent[member] = count
        return work

    async def sent_by(member: str) -> int:
        return sent[member]

    async def new_state() -> str:
        return new.state.value

    async def in_flight() -> int:
        return len(old_link.in_flight) + len(new_link.in_flight)

    old = LeaderRunner(old_link, role, "a", function("a"), options=options)
    new = LeaderRunner(new_link, role, "b", function("b"), options=options)
    await ends_consumer.start()
    try:
        await create_outputs(kafka_bootstrap, [first, second], old_link)
        old.start()
        await eventually(lambda: sent_by("a"), lambda count: count >= 3, WITHIN)
        new.start()
        await eventually(new_state, lambda state: state == "campaigning", WITHIN)
        await eventually(lambda: sent_by("a"), lambda count: count >= 6, WITHIN)
        await old.stop()  # cancels a function with a record to `second` on the slow link
        await eventually(lambda: sent_by("b"), lambda count: count >= 3, WITHIN)
        await new.stop()
        await eventually(in_flight, lambda left: left == 0, WITHIN)
    finally:
        for runner in (old, new):
            with contextlib.suppress(Exception):
                await runner.stop()
        await ends_consumer.stop()
        for link in (old_link, new_link):
            await link.close()

    successor = started["b"]
    records = await read_all(kafka_bootstrap, tps)
    for tp in tps:
        reader = TermFilter(fenced_topics=[first, second])
        judged = [(r.offset, reader.admit(tp.topic, tp.partition, r.headers),
                   decode_term_header(dict(r.headers)[TERM_HEADER]))
                  for r in records[tp]]
        before_start = [(verdict, stamp.term) for offset, verdict, stamp in judged
                        if offset < successor[tp]]
        assert ("barrier", 2) in before_start, f"{tp}: no barrier of term 2 before b started"
        late = [offset for offset, verdict, stamp in judged
                if verdict == "pass" and stamp.term < 2 and offset >= successor[tp]]
        assert late == [], f"{tp}: old-term records admitted after b started: {late}"
        assert any(verdict == "pass" and stamp.term == 2 for _, verdict, stamp in judged)

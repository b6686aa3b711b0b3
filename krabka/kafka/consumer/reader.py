"""`read_partition`: committed records from an offset to the last stable offset.

One read_committed consumer serves every read of a transport, of any topic
(the state topic's `read_partition`, term mode's `read_terms`). Reads are
batched: a call joins the next read that has not started yet, and one read
covers every partition asked for meanwhile. So a thousand candidates starting
at once cost one read per partition rather than a thousand, and no caller
ever gets a read that started before its call (it would miss records
committed just before the call). Callers of one partition may ask from
different offsets (a new candidate from 0, a standby from the stable offset it
already folded): the shared read starts at the lowest offset asked, and each
caller gets the records from its own offset on.

A read is complete when, for each partition, the consumer's position has
reached the last stable offset that the same fetch response reported. The
stable offset and the high watermark of the result therefore come from one
response and agree with the records: everything committed from the offset
asked to the stable offset is in the records, and a stable offset below the
high watermark means a transaction is open (on a topic nobody writes
transactionally, such as the terms topic, the stable offset is the high
watermark, so a read goes to the end). Each read assigns its partitions
afresh, so no mark of an earlier read's fetch can end it. Aborted records and
control markers are skipped by aiokafka's read_committed fetcher. The
consumer fetches with ``fetch_max_wait_ms=0`` (the broker answers at once,
also for an empty partition) and pauses its partitions between reads so it
does not poll.

A read looks at the marks after every Fetch response (`positions.answers`),
not after a poll interval: aiokafka's ``getmany`` wakes only for records, so
a read of a partition with nothing new (a standby that already folded what
its tail delivered, on every handover) used to wait out the whole poll.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import TopicPartition  # type: ignore[import-untyped, unused-ignore]

from krabka.kafka.consumer.positions import answers, marks, position
from krabka.kafka.errors import KafkaTransportError, KafkaUnavailableError
from krabka.kafka.lifecycle import stop_consumer
from krabka.rules.state import Record
from krabka.runtime.cancellation import bounded
from krabka.transport import PartitionRead

__all__ = ["PartitionReader"]


@dataclass(eq=False)
class _Ask:
    """The callers of one partition waiting for the next read, and where it starts."""

    from_offset: int
    result: asyncio.Future[PartitionRead] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())


def _from(read: PartitionRead, from_offset: int) -> PartitionRead:
    """The part of a shared read that one caller asked for: records from `from_offset` on."""
    start = bisect.bisect_left(read.records, from_offset, key=lambda r: r.offset)
    if start == 0:
        return read
    return PartitionRead(read.records[start:], read.last_stable_offset, read.high_watermark)


class PartitionReader:
    """Batched read_committed reads of topics' partitions."""

    def __init__(
        self,
        consumer: Callable[[], Awaitable[Any]],
        *,
        timeout: float,
    ) -> None:
        self._new_consumer = consumer
        self._consumer: Any = None
        self._answered = asyncio.Event()
        self._timeout = timeout
        self._queued: dict[Any, _Ask] = {}
        self._runner: asyncio.Task[None] | None = None

    async def read(self, topic: str, partition: int, from_offset: int = 0) -> PartitionRead:
        """Every committed record of `topic`'s `partition` from `from_offset` up to
        its last stable offset."""
        tp = TopicPartition(topic, partition)
        ask = self._queued.get(tp)
        if ask is None:
            ask = self._queued[tp] = _Ask(from_offset)
        else:
            ask.from_offset = min(ask.from_offset, from_offset)
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run(), name="read partitions")
        # Shielded: a cancelled caller must not cancel a read others share.
        return _from(await asyncio.shield(ask.result), from_offset)

    async def close(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)
        for result in (ask.result for ask in self._queued.values()):
            if not result.done():
                result.set_exception(KafkaTransportError("the transport was closed"))
                result.exception()
        self._queued.clear()
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await stop_consumer(consumer)

    async def _run(self) -> None:
        while self._queued:
            batch, self._queued = self._queued, {}
            try:
                reads = await bounded(
                    self._read({tp: ask.from_offset for tp, ask in batch.items()}),
                    self._timeout)
            except BaseException as exc:
                error: BaseException = exc
                if isinstance(exc, asyncio.CancelledError):
                    error = KafkaTransportError("the transport was closed")
                elif isinstance(exc, TimeoutError):
                    names = ", ".join(sorted({f"{tp.topic}-{tp.partition}" for tp in batch}))
                    error = KafkaUnavailableError(
                        f"reading {names} took longer than {self._timeout:g} s")
                for result in (ask.result for ask in batch.values()):
                    if not result.done():
                        result.set_exception(error)
                        result.exception()  # retrieved: a cancelled caller may never read it
                if isinstance(exc, asyncio.CancelledError):
                    raise
                continue
            for tp, ask in batch.items():
                if not ask.result.done():
                    ask.result.set_result(reads[tp])

    async def _read(self, starts: dict[Any, int]) -> dict[Any, PartitionRead]:
        if self._consumer is None:
            consumer = await self._new_consumer()
            self._answered = answers(consumer)
            self._consumer = consumer
        consumer = self._consumer
        tps = list(starts)
        consumer.assign(tps)
        for tp, offset in starts.items():
            # An offset rather than seek_to_beginning (a ListOffsets round trip):
            # auto_offset_reset="earliest" moves a position below the log start.
            consumer.seek(tp, offset)
        records: dict[Any, list[Record]] = {tp: [] for tp in tps}
        reads: dict[Any, PartitionRead] = {}
        pending = set(tps)
        try:
            while True:
                # Cleared before the drain: a response taken in after it sets
                # the event again, so the wait below never misses one. With
                # fetch_max_wait_ms=0 the fetcher asks again at once, so another
                # response always comes (the read's timeout bounds an outage).
                self._answered.clear()
                batch = await consumer.getmany(*pending, timeout_ms=0)
                for tp, messages in batch.items():
                    records[tp].extend(
                        Record(m.offset, m.key or b"", m.value, m.timestamp) for m in messages
                    )
                for tp in list(pending):
                    lso, hw = marks(consumer, tp)
                    at = position(consumer, tp)
                    if lso is not None and hw is not None and at is not None and at >= lso:
                        reads[tp] = PartitionRead(records[tp], lso, hw)
                        pending.discard(tp)
                        consumer.pause(tp)
                if not pending:
                    break
                await self._answered.wait()
        finally:
            consumer.pause(*tps)
        return reads

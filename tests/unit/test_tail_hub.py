"""The hub of the Kafka adapter's tails, on a consumer faked at aiokafka's surface.

What it promises a tail: the committed records from the tail's own offset on,
and marks (stable offset, high watermark) no older than that offset. A
partition nobody follows is paused, so its marks stop moving; the next tail
of it must not be handed those.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from aiokafka import TopicPartition

from coordination.kafka.tail import TailHub
from tests.support.loop import run_ready_callbacks

TP = TopicPartition("state", 0)
DEADLINE = 5.0


class FakeConsumer:
    """One partition: what a fetch brought (records, marks) and where the consumer stands."""

    def __init__(self) -> None:
        self.positions: dict[Any, int] = {}
        self.lso: int | None = None
        self.hw: int | None = None
        self.paused_tps: set[Any] = set()
        self.fetched: asyncio.Queue[dict[Any, list[Any]]] = asyncio.Queue()
        self.stopped = False
        self.polls = 0
        self._polled = asyncio.Event()
        self._subscription = SimpleNamespace(subscription=SimpleNamespace(
            assignment=SimpleNamespace(state_value=self._state)))

    def _state(self, tp: Any) -> Any:
        at = self.positions.get(tp)
        return SimpleNamespace(has_valid_position=at is not None, position=at)

    def fetch(self, offsets: list[int], lso: int) -> None:
        """A fetch response: records at `offsets`, then the partition's marks."""
        messages = [SimpleNamespace(offset=o, key=b"k", value=b"v", timestamp=0) for o in offsets]
        self.lso = self.hw = lso
        self.fetched.put_nowait({TP: messages})

    # aiokafka's consumer, as far as the hub uses it.

    def assign(self, tps: list[Any]) -> None:
        self.positions = {tp: 0 for tp in tps}
        self.paused_tps = set()

    def seek(self, tp: Any, offset: int) -> None:
        self.positions[tp] = offset

    def pause(self, tp: Any) -> None:
        self.paused_tps.add(tp)

    def resume(self, tp: Any) -> None:
        self.paused_tps.discard(tp)

    def last_stable_offset(self, tp: Any) -> int | None:
        return self.lso

    def highwater(self, tp: Any) -> int | None:
        return self.hw

    async def stop(self) -> None:
        self.stopped = True

    async def getmany(self, timeout_ms: int) -> dict[Any, list[Any]]:
        try:
            batch = await asyncio.wait_for(self.fetched.get(), timeout_ms / 1000)
        except TimeoutError:
            batch = {}
        for tp, messages in batch.items():
            if messages:
                self.positions[tp] = messages[-1].offset + 1
        self.polls += 1
        self._polled.set()
        return batch

    async def passes(self, count: int) -> None:
        """Wait until the hub has polled `count` more times (and handled each poll:
        it does so in the step the poll returns in)."""
        target = self.polls + count
        while self.polls < target:
            self._polled.clear()
            await asyncio.wait_for(self._polled.wait(), DEADLINE)


async def hub_on(consumer: FakeConsumer) -> TailHub:
    async def started() -> FakeConsumer:
        return consumer

    return TailHub(started, poll_ms=1)


async def test_the_next_tail_of_a_paused_partition_gets_no_marks_older_than_its_offset():
    consumer = FakeConsumer()
    hub = await hub_on(consumer)
    try:
        first = await hub.follow(TP.topic, TP.partition, 0)
        consumer.fetch([0], lso=1)
        read = await asyncio.wait_for(first.next(), DEADLINE)
        assert ([r.offset for r in read.records], read.last_stable_offset) == ([0], 1)
        await first.close()
        assert consumer.paused_tps == {TP}  # nobody follows it: no more fetches of it

        # Four records were committed meanwhile; a follower's own read saw the
        # stable offset at 5 and starts its tail there. The consumer still
        # holds the marks of its last fetch, from before the pause.
        second = await hub.follow(TP.topic, TP.partition, 5)
        assert consumer.paused_tps == set()
        pending = asyncio.ensure_future(second.next())
        await consumer.passes(3)
        await run_ready_callbacks()
        assert not pending.done()  # the stale marks (1) are not a read
        consumer.fetch([5], lso=6)
        read = await asyncio.wait_for(pending, DEADLINE)
        assert ([r.offset for r in read.records], read.last_stable_offset) == ([5], 6)
        await second.close()
    finally:
        await hub.close()


async def test_a_partition_stays_fetched_while_one_of_its_tails_is_open():
    consumer = FakeConsumer()
    hub = await hub_on(consumer)
    try:
        tails = [await hub.follow(TP.topic, TP.partition, 0) for _ in range(2)]
        await tails[0].close()
        assert consumer.paused_tps == set()
        consumer.fetch([0], lso=1)
        read = await asyncio.wait_for(tails[1].next(), DEADLINE)
        assert [r.offset for r in read.records] == [0]
        await tails[1].close()
        assert consumer.paused_tps == {TP}
    finally:
        await hub.close()

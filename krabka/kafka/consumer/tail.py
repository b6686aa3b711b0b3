"""`tail`: followers of partitions, all served by one consumer.

A process holding a thousand roles has a thousand waiting candidates, each
following its role's partition of the state topic (and in term mode of the
terms topic). They share one read_committed consumer (the `TailHub`): it is
assigned every partition of any topic someone follows, and a loop hands
each fetched record to the followers of its partition (`KafkaTail`), each
keeping its own queue. A thousand tails therefore cost one consumer, one
fetch session and one long poll per broker, not a thousand.

Marks and records stay consistent: a tail hears of a new last stable offset
only once the hub has consumed everything below it (position >= stable
offset, read from the same Fetch response), so a `PartitionRead` always holds
every committed record below the stable offset it reports. Records arrive at
once (the broker answers a read_committed long poll as soon as the stable
offset moves); a move of the high watermark alone (a transaction opened)
shows within one ``fetch_max_wait_ms`` plus one loop pass.

A tail of one role (``role=``, a waiting candidate's, or a term-mode
member's of the terms topic) is handed only that role's records and those
whose key does not decode, grouped by role once per fetch (each topic's keys
by its own decoder), and is woken only by them: a partition of hundreds of
roles would otherwise wake every waiting candidate of every role at each
renewal or heartbeat of any of them. Its marks are kept current all the
same, without waking it.

A fetch that fails for a transient reason (the broker restarting, the network
away: `is_transient`) is sent again after a short delay, from where the hub
stands in each partition; the tails only wait longer. Any other fetch error
fails every tail (its `next()` raises the error) and the hub starts afresh for
the tails opened after it: a follower drops a failed tail and opens a new one
(`krabka.follower.Tailing`).

A new tail that starts below the hub's position rewinds the partition; the
other tails drop the records they already had (each tracks the next offset it
accepts). `next()` is cancel-safe: it only waits on an event, and records are
taken from the queue in the same step the read is returned. A partition stays
assigned after its last tail closes (the topic has few partitions and an idle
partition costs nothing in a fetch), so the next tail of it starts warm.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import TopicPartition  # type: ignore[import-untyped, unused-ignore]

from krabka.errors import InvalidStateError
from krabka.format.records import role_of
from krabka.kafka.consumer.positions import marks, position
from krabka.kafka.errors import KafkaTransportError, is_outage, is_transient
from krabka.kafka.lifecycle import stop_consumer
from krabka.rules.state import Record
from krabka.transport import PartitionRead

__all__ = ["KafkaTail", "TailHub"]

log = logging.getLogger("krabka.kafka")

Marks = tuple[int, int]

REFETCH_DELAY = 0.25
"""Seconds between a fetch that failed for a transient reason and the next."""
KeyRole = Callable[[bytes], str | None]


class KafkaTail:
    """One follower of one partition (`PartitionTail`)."""

    def __init__(self, hub: TailHub, topic: str, partition: int, from_offset: int,
                 role: str | None = None) -> None:
        self._hub = hub
        self.topic = topic
        self.partition = partition
        self.role = role
        self._accept_from = from_offset
        self._from_offset = from_offset
        self._records: list[Record] = []
        self._marks: Marks | None = None
        self._returned: Marks | None = None
        self._changed = asyncio.Event()
        self._error: BaseException | None = None
        self._closed = False

    async def next(self) -> PartitionRead:
        """The records committed since the last call, once the partition changed."""
        while True:
            if self._error is not None:
                if not is_outage(self._error):
                    raise self._error  # a bug, not an outage: never retried as one
                raise KafkaTransportError(
                    f"following {self.topic}-{self.partition} failed: {self._error!r}"
                ) from self._error
            if self._closed:
                raise InvalidStateError(f"the tail of {self.topic}-{self.partition} is closed")
            read = self._take()
            if read is not None:
                return read
            self._changed.clear()
            await self._changed.wait()

    def returned_to(self) -> int:
        """Below the hub's stable offset and this tail's first record not yet returned."""
        below = self._from_offset if self._marks is None else self._marks[0]
        return min(below, self._records[0].offset) if self._records else below

    async def close(self) -> None:
        """Stop following; a pending `next()` raises."""
        if not self._closed:
            self._closed = True
            self._hub._forget(self)
            self._changed.set()

    # Called by the hub's loop.

    def _push(self, records: list[Record]) -> None:
        for record in records:
            if record.offset >= self._accept_from:
                self._records.append(record)
                self._accept_from = record.offset + 1

    def _offer(self, caught_up: Marks) -> None:
        # The hub consumed everything below the stable offset: nothing this
        # tail has not seen remains there.
        self._accept_from = max(self._accept_from, caught_up[0])
        if self.role is not None:
            # Marks alone wake no tail of one role; its records below them do.
            self._marks = caught_up
            if self._records and self._records[0].offset < caught_up[0]:
                self._changed.set()
        elif caught_up != self._marks or self._records:
            self._marks = caught_up
            self._changed.set()

    def _fail(self, error: BaseException) -> None:
        self._error = error
        self._changed.set()

    def _take(self) -> PartitionRead | None:
        if self._marks is None:
            return None
        lso, hw = self._marks
        ready = [r for r in self._records if r.offset < lso]
        if not ready and (self.role is not None or self._marks == self._returned):
            return None
        self._records = [r for r in self._records if r.offset >= lso]
        self._returned = self._marks
        return PartitionRead(ready, lso, hw)


class _Feed:
    """The hub's view of one assigned partition; `key_role` names the role a
    key of its topic belongs to (None for a key that does not decode)."""

    def __init__(self, tp: Any, position: int, key_role: KeyRole) -> None:
        self.tp = tp
        self.position = position
        self.key_role = key_role
        self.marks: Marks | None = None
        self.tails: set[KafkaTail] = set()
        self.every_record: set[KafkaTail] = set()
        self.by_role: dict[str, set[KafkaTail]] = {}
        self.dirty = False

    def add(self, tail: KafkaTail) -> None:
        self.tails.add(tail)
        if tail.role is None:
            self.every_record.add(tail)
        else:
            self.by_role.setdefault(tail.role, set()).add(tail)

    def remove(self, tail: KafkaTail) -> None:
        self.tails.discard(tail)
        self.every_record.discard(tail)
        if tail.role is not None:
            same = self.by_role.get(tail.role)
            if same is not None:
                same.discard(tail)
                if not same:
                    del self.by_role[tail.role]

    def push(self, records: list[Record]) -> None:
        """Hand fetched `records` to the tails: all to those of every record,
        each role's (and any whose key does not decode) to that role's."""
        for tail in self.every_record:
            tail._push(records)
        if not self.by_role:
            return
        groups: dict[str, list[Record]] = {}
        odd: list[Record] = []
        for record in records:
            role = self.key_role(record.key)
            if role is None:
                odd.append(record)
            else:
                groups.setdefault(role, []).append(record)
        if not odd:
            for role, mine in groups.items():
                for tail in self.by_role.get(role, ()):
                    tail._push(mine)
            return
        # A key that does not decode reaches every role's tail, in offset order.
        for role, tails in self.by_role.items():
            mine = sorted([*groups.get(role, ()), *odd], key=lambda r: r.offset)
            for tail in tails:
                tail._push(mine)

    def observe(self, consumer: Any) -> None:
        at = position(consumer, self.tp)
        lso, hw = marks(consumer, self.tp)
        if at is not None:
            self.position = at
        if at is None or lso is None or hw is None or at < lso:
            return  # still catching up: records are queued, marks wait
        if (lso, hw) != self.marks or self.dirty:
            self.marks = (lso, hw)
            self.dirty = False
            for tail in self.tails:
                tail._offer(self.marks)


class TailHub:
    """One read_committed consumer following every tailed partition of a transport."""

    def __init__(
        self,
        consumer: Callable[[], Awaitable[Any]],
        *,
        poll_ms: int = 50,
    ) -> None:
        self._new_consumer = consumer
        self._poll_ms = poll_ms
        self._consumer: Any = None
        self._start_lock = asyncio.Lock()
        self._feeds: dict[Any, _Feed] = {}
        self._loop_task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    @property
    def tails(self) -> int:
        """How many tails are open."""
        return sum(len(feed.tails) for feed in self._feeds.values())

    async def follow(self, topic: str, partition: int, from_offset: int,
                     role: str | None = None, key_role: KeyRole = role_of) -> KafkaTail:
        """A tail of `topic`'s `partition` returning committed records from
        `from_offset` on (only `role`'s, with `role`: `StateReader.tail`).

        `key_role` decodes the role from a key of `topic` (the state topic's
        keys by default; the terms topic's tails pass `term_role_of`).
        """
        consumer = await self._started()
        tail = KafkaTail(self, topic, partition, from_offset, role)
        tp = TopicPartition(topic, partition)
        feed = self._feeds.get(tp)
        if feed is None:
            feed = _Feed(tp, from_offset, key_role)
            self._feeds[tp] = feed
            self._reassign(consumer)
        elif from_offset < feed.position:
            # Rewind; the other tails drop what they already have.
            consumer.seek(feed.tp, from_offset)
            feed.position = from_offset
        elif feed.marks is not None and from_offset == feed.position == feed.marks[0]:
            # Caught up exactly where this tail starts: it can answer at once.
            tail._offer(feed.marks)
        feed.add(tail)
        feed.dirty = True
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.create_task(self._run(consumer), name="tail partitions")
        self._wake.set()
        return tail

    async def close(self) -> None:
        task, self._loop_task = self._loop_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        for feed in self._feeds.values():
            for tail in list(feed.tails):
                tail._fail(KafkaTransportError("the transport was closed"))
        self._feeds.clear()
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await stop_consumer(consumer)

    def _forget(self, tail: KafkaTail) -> None:
        feed = self._feeds.get(TopicPartition(tail.topic, tail.partition))
        if feed is not None:
            feed.remove(tail)

    async def _started(self) -> Any:
        async with self._start_lock:
            if self._consumer is None:
                self._consumer = await self._new_consumer()
            return self._consumer

    def _reassign(self, consumer: Any) -> None:
        # assign() replaces the assignment and forgets every position: seek
        # each partition back to where the hub stands, in the same step.
        consumer.assign([feed.tp for feed in self._feeds.values()])
        for feed in self._feeds.values():
            consumer.seek(feed.tp, feed.position)

    async def _run(self, consumer: Any) -> None:
        # The transient error met since the last fetch that answered, if any:
        # an outage is logged once as it starts and once as it ends.
        outage: BaseException | None = None
        try:
            while True:
                if not self._feeds:
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                try:
                    batch = await consumer.getmany(timeout_ms=self._poll_ms)
                except Exception as exc:
                    if not is_transient(exc):
                        self._fail_all(exc)
                        continue
                    if outage is None:
                        log.warning("following %s failed, fetching again: %r",
                                    self._followed(), exc)
                    outage = exc
                    await self._refetch(consumer)
                    continue
                if outage is not None:
                    log.info("following %s again after %r", self._followed(), outage)
                    outage = None
                self._dispatch(batch)
                for feed in self._feeds.values():
                    feed.observe(consumer)
        except Exception as exc:  # a bug here must not leave tails waiting forever
            log.exception("the partition follower stopped")
            self._fail_all(exc)

    def _dispatch(self, batch: dict[Any, list[Any]]) -> None:
        for tp, messages in batch.items():
            feed = self._feeds.get(tp)
            if feed is None or not messages:
                continue
            feed.push([Record(m.offset, m.key or b"", m.value, m.timestamp)
                       for m in messages])
            feed.dirty = True

    async def _refetch(self, consumer: Any) -> None:
        """After a transient fetch error: wait a little, then fetch again from
        where the hub stands in every partition. The tails keep waiting; they
        lose nothing and read nothing twice."""
        await asyncio.sleep(REFETCH_DELAY)
        for feed in self._feeds.values():
            consumer.seek(feed.tp, feed.position)

    def _followed(self) -> str:
        return ", ".join(sorted({tp.topic for tp in self._feeds}))

    def _fail_all(self, error: BaseException) -> None:
        """A fetch error no retry outlasts ends every tail (each raises it once;
        its follower starts a new one); the hub starts afresh for new tails."""
        log.warning("following %s failed: %r", self._followed(), error)
        for feed in self._feeds.values():
            for tail in feed.tails:
                tail._fail(error)
        self._feeds.clear()
        with contextlib.suppress(Exception):
            self._consumer.assign([])

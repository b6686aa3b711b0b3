"""The live feed: the events this worker's fold publishes, fanned out in process.

The fold agent hands every event it publishes to the events topic to
`EventFeed.publish` as well; the web view's server-sent events stream
(``GET /events/``) subscribes. Publishing never waits: each subscriber has a
bounded queue, and one that is full (a client reading slower than the fold
writes) is dropped, so no reader can hold the fold back; its client
reconnects and is sent the recent events again. The feed keeps the last
`history` events for that, and for a dashboard opened later.

The fold publishes before its Kafka transaction commits, so an event of a
transaction that aborts (a fence of Faust's producer at a rebalance) can be
seen here and then again from the partition's next owner: subscribers dedupe
by ``(role, kind, offset)``, as readers of the topic do (docs/events.md).
"""

from __future__ import annotations

import asyncio
from collections import deque

from krabka.observe.events import LeadershipEvent

__all__ = ["Dropped", "EventFeed", "Subscription"]

QUEUE_SIZE = 1000
"""Events a subscriber may fall behind by before it is dropped."""
HISTORY = 1000
"""Recent events a new subscriber is sent first."""


class Dropped(Exception):
    """The subscriber fell `QUEUE_SIZE` events behind, or the feed closed."""


class Subscription:
    """One reader of the feed: the recent events at subscription, then each new one."""

    def __init__(self, feed: EventFeed, replay: list[LeadershipEvent], size: int) -> None:
        self._feed = feed
        self.replay = replay
        """The feed's recent events when this subscription began, oldest first."""
        self._queue: asyncio.Queue[LeadershipEvent | None] = asyncio.Queue(size)
        self.dropped: str | None = None
        """Why the feed stopped serving this subscriber (None while it serves it)."""

    def offer(self, event: LeadershipEvent) -> bool:
        """Queue `event` without waiting; False (and ended) if the queue is full."""
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            self.end(f"it fell {self._queue.maxsize} events behind")
            return False
        return True

    def end(self, why: str) -> None:
        """Stop serving this subscriber: its reader's next `get` raises `Dropped`."""
        if self.dropped is not None:
            return
        self.dropped = why
        # The queue may be full: make room for the wake-up of a waiting reader.
        while self._queue.full():
            self._queue.get_nowait()
        self._queue.put_nowait(None)

    async def get(self) -> LeadershipEvent:
        """The next event; `Dropped` once this subscriber was dropped."""
        if self.dropped is not None:
            raise Dropped(self.dropped)
        event = await self._queue.get()
        if event is None:
            raise Dropped(self.dropped or "dropped")
        return event

    def close(self) -> None:
        """Stop receiving events."""
        self._feed.unsubscribe(self)


class EventFeed:
    """Fan-out of one worker's events to its subscribers."""

    def __init__(self, *, queue_size: int = QUEUE_SIZE, history: int = HISTORY) -> None:
        if queue_size < 1 or history < 0:
            raise ValueError(f"queue_size must be at least 1 and history at least 0, "
                             f"got {queue_size} and {history}")
        self._queue_size = queue_size
        self._recent: deque[LeadershipEvent] = deque(maxlen=history)
        self._subscribers: set[Subscription] = set()
        self.dropped = 0
        """Subscribers dropped for falling behind, since the feed began."""

    @property
    def subscribers(self) -> int:
        """How many subscribers are served now."""
        return len(self._subscribers)

    def publish(self, event: LeadershipEvent) -> None:
        """Hand `event` to every subscriber; never waits."""
        self._recent.append(event)
        for subscriber in list(self._subscribers):
            if not subscriber.offer(event):
                self._subscribers.discard(subscriber)
                self.dropped += 1

    def subscribe(self) -> Subscription:
        """A new subscriber: the recent events, then every one published after."""
        subscription = Subscription(self, list(self._recent), self._queue_size)
        self._subscribers.add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        """Stop serving `subscription` (idempotent)."""
        self._subscribers.discard(subscription)

    def close(self) -> None:
        """End every subscription (the worker stops: its web server waits for them)."""
        for subscriber in list(self._subscribers):
            subscriber.end("the worker is stopping")
        self._subscribers.clear()

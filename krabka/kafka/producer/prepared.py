"""Role producers connected ahead of a challenge, so a handover waits for less.

A new role producer's ``start()`` is four waits in a row: connect to a
bootstrap broker, read the cluster's metadata, find the role's transaction
coordinator (and connect to it), then InitProducerId, which mints the epoch.
Only the last one must wait for the challenge: the first three read and
change nothing. A standby first in line for a role therefore has this
transport prepare its producer while it waits (`PreparedProducers.prepare`):
the producer is built with the role's ``transactional_id`` and transaction
timeout, started from what its transport's own client knows of the
brokers, the state topic and the role's coordinator
(`krabka.kafka.producer.seeded`; bootstrapped, the state topic's metadata
read and the coordinator found by itself when the transport cannot tell),
the metadata of the role's declared outputs read (so that the new leader's
first guarded write does not wait for a Metadata request), and its
connections to the coordinator, to the state partition's leader and to the
outputs' leaders opened. An output is asked for only once it is known to
exist (the transport's topic check, which cannot create a topic): aiokafka's
own Metadata requests would create a missing one on a cluster that
auto-creates topics, and a standby must not create what a leader might never
write. No InitProducerId is
sent, so no epoch moves and nobody is fenced. When the challenge comes,
`take` hands the producer over and ``acquire_epoch`` starts only its sender,
whose first act is the InitProducerId (`start_prepared`).

It is an optimisation only, best effort at every step: a preparation that
fails or has not finished when the challenge comes is dropped, and the
challenge starts a producer from scratch as it would without one. At most
`limit` producers are kept prepared per transport (a socket per broker and a
metadata refresh each); the oldest is closed to make room.

A challenger that has decided to challenge prepares its producer too, and
waits for it (`ready`) before it reads the partition for the last time: the
decision then stands on a read followed by the InitProducerId alone, not by
the seconds a busy process can take to connect, during which another member
could take the role at its own slot and the new epoch would fence it. Such a
preparation is
**pinned**: it is the producer the challenge opens anyway, taken at once, so
it does not count towards `limit`, is never closed to make room, and is made
even with `limit` 0. aiokafka has no
public way to start a producer's network client apart from its sender, so
the client's ``bootstrap()``, the sender's coordinator lookup and its
``start()`` are called here directly (listed in
`krabka.kafka.aiokafka_internals`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiokafka.structs import TopicPartition  # type: ignore[import-untyped, unused-ignore]

from krabka.kafka.aiokafka_internals import find_transaction_coordinator, start_sender
from krabka.kafka.lifecycle import stop_producer
from krabka.kafka.producer.seeded import Seed, start_seeded
from krabka.runtime.cancellation import bounded

__all__ = ["PreparedProducers", "start_prepared"]

log = logging.getLogger("krabka.kafka")


@dataclass
class _Preparation:
    producer: Any
    timeout_ms: int
    task: asyncio.Task[None]
    pinned: bool


class PreparedProducers:
    """At most `limit` role producers, each connected but not yet started."""

    def __init__(self, build: Callable[[str, int], Any], *, topic: str,
                 exists: Callable[[str], Awaitable[bool]], limit: int, timeout: float,
                 seed: Callable[[str], Awaitable[Seed]] | None = None) -> None:
        if limit < 0:
            raise ValueError(f"the number of prepared producers must be >= 0, got {limit}")
        self._build = build
        self._seed = seed
        self._topic = topic
        self._exists = exists
        self._limit = limit
        self._timeout = timeout
        self._by_role: dict[str, _Preparation] = {}
        # Closes started by `discard`, held so that asyncio does not drop them
        # and so that `close` can wait for them.
        self._closing: set[asyncio.Task[None]] = set()

    def prepare(self, role: str, timeout_ms: int, partition: int,
                outputs: tuple[str, ...] = (), *, pinned: bool = False) -> None:
        """Start preparing `role`'s producer in the background (nothing if already
        so); `pinned`: for a challenge about to be made, outside the limit."""
        held = self._by_role.get(role)
        if held is not None and held.timeout_ms == timeout_ms:
            held.pinned = pinned
            self._make_room()
            return
        if self._limit == 0 and not pinned:
            return
        self.discard(role)
        producer = self._build(role, timeout_ms)
        task = asyncio.ensure_future(self._connect(role, producer, partition, outputs))
        self._by_role[role] = _Preparation(producer, timeout_ms, task, pinned)
        self._make_room()

    async def ready(self, role: str) -> None:
        """Return once `role`'s preparation has ended, well or not (at once without one)."""
        held = self._by_role.get(role)
        if held is not None:
            # `wait` neither raises the preparation's error (it was logged, and
            # `take` drops it) nor turns its cancellation into this caller's.
            await asyncio.wait([held.task])

    def _make_room(self) -> None:
        """Close the oldest unpinned preparations beyond the limit."""
        unpinned = [role for role, held in self._by_role.items() if not held.pinned]
        for role in unpinned[:max(0, len(unpinned) - self._limit)]:
            self.discard(role)

    def take(self, role: str, timeout_ms: int) -> Any | None:
        """`role`'s producer if its preparation finished well; None otherwise.

        A preparation still running, failed, or made for another transaction
        timeout is discarded: the challenge must not wait for it.
        """
        held = self._by_role.get(role)
        if held is None:
            return None
        task = held.task
        if (task.done() and not task.cancelled() and task.exception() is None
                and held.timeout_ms == timeout_ms):
            del self._by_role[role]
            return held.producer
        self.discard(role)
        return None

    def discard(self, role: str) -> None:
        """Drop `role`'s prepared producer, if any; it is closed in the background."""
        held = self._by_role.pop(role, None)
        if held is not None:
            held.task.cancel()
            closing = asyncio.ensure_future(self._close(held))
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        """Close every prepared producer (bounded)."""
        held = list(self._by_role.values())
        self._by_role.clear()
        for preparation in held:
            preparation.task.cancel()
        await asyncio.gather(*(self._close(p) for p in held), *self._closing)

    def __len__(self) -> int:
        return len(self._by_role)

    def __contains__(self, role: object) -> bool:
        return role in self._by_role

    async def _connect(self, role: str, producer: Any, partition: int,
                       outputs: tuple[str, ...]) -> None:
        try:
            await bounded(self._warm(role, producer, partition, outputs), self._timeout)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # Only the saving is lost: the challenge starts a producer of its own.
            log.info("%s: could not prepare the role's producer (%r); a challenge "
                     "starts one from scratch", role, exc)
            raise

    async def _warm(self, role: str, producer: Any, partition: int,
                    outputs: tuple[str, ...]) -> None:
        client = producer.client
        seed = await self._seeded(role)
        if seed is None:
            # The role producer's bootstrap is guarded (`guard_bootstrap`): a
            # discarded preparation lets it finish before the producer stops.
            await bounded(client.bootstrap(), self._timeout)
        else:
            start_seeded(producer, seed)
        # aiokafka's bootstrap asks for no topic's metadata (an empty list on
        # Metadata v1+): the state topic's is read now (unless seeded), not at
        # the first lease, in the same request as the existing outputs' (the
        # topics the client tracks). A missing output is left out: its first
        # write asks for it.
        present = [topic for topic in outputs if await self._exists(topic)]
        client.set_topics([self._topic, *present])
        await producer.partitions_for(self._topic)
        coordinator = await find_transaction_coordinator(producer, role)
        leaders = {coordinator,
                   client.cluster.leader_for_partition(TopicPartition(self._topic, partition))}
        for topic in present:
            for index in client.cluster.partitions_for_topic(topic) or ():
                leaders.add(client.cluster.leader_for_partition(TopicPartition(topic, index)))
        for leader in leaders:
            if leader is not None and leader >= 0:
                await client.ready(leader)

    async def _seeded(self, role: str) -> Seed | None:
        """What the transport knows for `role`'s client, or None to bootstrap it."""
        if self._seed is None:
            return None
        try:
            return await self._seed(role)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.debug("%s: no seed for the role producer's client (%r); it bootstraps", role, exc)
            return None

    @staticmethod
    async def _close(held: _Preparation) -> None:
        # The preparation was cancelled or has ended; its outcome was logged.
        with contextlib.suppress(BaseException):
            await held.task
        await stop_producer(held.producer)


async def start_prepared(producer: Any) -> None:
    """Start a prepared producer: its sender's InitProducerId mints the epoch.

    ``AIOKafkaProducer.start()`` would bootstrap the client a second time; the
    sender's ``start()`` is the rest of it.
    """
    await start_sender(producer)

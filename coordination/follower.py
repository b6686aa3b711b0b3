"""A candidate's view of its role's partition: read once, then tail.

Waiting is event-driven: a standby wakes on the next committed record (a
renewal, a resignation's tombstone) within one fetch round trip, or at the
instant `evaluate` named, whichever comes first.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from coordination.clock import Clock
from coordination.state import Record, RoleState, build_role_state
from coordination.transport import PartitionRead, PartitionTail, StateReader

__all__ = ["PartitionFollower"]


class PartitionFollower:
    """The committed records of one partition, kept current by a tail."""

    def __init__(self, reader: StateReader, partition: int, clock: Clock) -> None:
        self._reader = reader
        self.partition = partition
        self._clock = clock
        self.records: list[Record] = []
        self.last_stable_offset = 0
        self.high_watermark = 0
        self._tail: PartitionTail | None = None
        self._pending: asyncio.Task[PartitionRead] | None = None

    async def refresh(self) -> None:
        """Re-read the partition from its first offset to the last stable offset."""
        read = await self._reader.read_partition(self.partition)
        self.records = list(read.records)
        self._marks(read)
        await self._drop_tail()
        self._tail = await self._reader.tail(self.partition, read.last_stable_offset)

    def state(self, role: str) -> RoleState:
        """`role`'s state as of the records read so far."""
        return build_role_state(role, self.records)

    async def wait(self, until_ms: int | None) -> bool:
        """Wait for the partition to change, or for `until_ms` on the clock.

        Returns True when new records or stable-offset marks arrived.
        """
        if self._tail is None:
            await self.refresh()
        assert self._tail is not None
        if self._pending is None:
            self._pending = asyncio.ensure_future(self._tail.next())
        waiters: list[asyncio.Future[Any]] = [self._pending]
        sleeper = None
        if until_ms is not None:
            sleeper = asyncio.ensure_future(self._clock.sleep_until(until_ms))
            waiters.append(sleeper)
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if sleeper is not None:
                sleeper.cancel()
        if not self._pending.done():
            return False
        read = self._pending.result()
        self._pending = None
        self._apply(read)
        return True

    def _apply(self, read: PartitionRead) -> None:
        last = self.records[-1].offset if self.records else -1
        self.records.extend(r for r in read.records if r.offset > last)
        self._marks(read)

    def _marks(self, read: PartitionRead) -> None:
        self.last_stable_offset = read.last_stable_offset
        self.high_watermark = read.high_watermark

    async def _drop_tail(self) -> None:
        if self._pending is not None:
            self._pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._pending
            self._pending = None
        if self._tail is not None:
            await self._tail.close()
            self._tail = None

    async def close(self) -> None:
        """Stop tailing."""
        await self._drop_tail()

"""Clocks: the wall clock leases are written in, and a manual one for tests.

The lease deadline is a wall-clock instant written by the holder and read by
challengers, so clock skew moves failover time by the size of the skew. No
clock takes part in the fence, so skew never affects safety.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol

__all__ = ["Clock", "ManualClock", "SystemClock"]


class Clock(Protocol):
    """Wall-clock time in epoch milliseconds, and sleeping until an instant."""

    def now_ms(self) -> int:
        """The current time in epoch milliseconds."""
        ...

    async def sleep_until(self, at_ms: int) -> None:
        """Return once `now_ms()` has reached `at_ms`."""
        ...


class SystemClock:
    """The machine's wall clock."""

    def now_ms(self) -> int:
        """The current time in epoch milliseconds."""
        return time.time_ns() // 1_000_000

    async def sleep_until(self, at_ms: int) -> None:
        """Sleep until the wall clock reaches `at_ms`, re-checking after each wake.

        The loop keeps the promise if the wall clock is stepped back while sleeping.
        """
        # An Event cannot wait for a wall-clock instant; re-checking can.
        while (remaining := at_ms - self.now_ms()) > 0:  # noqa: ASYNC110
            await asyncio.sleep(remaining / 1000)


class ManualClock:
    """A clock that moves only when a test calls `advance`.

    Sleepers wake in deadline order when the clock passes their instant, so a
    test drives lease deadlines, renewals and challenge slots without sleeping.
    """

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = start_ms
        self._sleepers: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def now_ms(self) -> int:
        """The clock's current time in epoch milliseconds."""
        return self._now_ms

    async def sleep_until(self, at_ms: int) -> None:
        """Wait until `advance` has moved the clock to `at_ms` or beyond."""
        if at_ms <= self._now_ms:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (at_ms, next(self._order), waiter))
        await waiter

    def advance(self, seconds: float) -> None:
        """Move the clock forward by `seconds` and wake every sleeper now due."""
        self.advance_ms(round(seconds * 1000))

    def advance_ms(self, ms: int) -> None:
        """Move the clock forward by `ms` milliseconds and wake those now due."""
        if ms < 0:
            raise ValueError("a ManualClock never moves backwards")
        self._now_ms += ms
        while self._sleepers and self._sleepers[0][0] <= self._now_ms:
            _, _, waiter = heapq.heappop(self._sleepers)
            if not waiter.done():
                waiter.set_result(None)

    @property
    def next_wake_ms(self) -> int | None:
        """The earliest instant a sleeper waits for, or None when none waits."""
        while self._sleepers and self._sleepers[0][2].done():
            heapq.heappop(self._sleepers)
        return self._sleepers[0][0] if self._sleepers else None

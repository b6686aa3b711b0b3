"""A clock that moves only when a test says so: the `krabka.clock.Clock` a
test drives lease deadlines, renewals and challenge slots with, without
sleeping."""

from __future__ import annotations

import asyncio
import heapq
import itertools

__all__ = ["ManualClock"]


class ManualClock:
    """A clock that moves only when a test says so.

    `advance` moves both clocks forward; `step_wall` moves only the wall
    clock, either way, as NTP does. Sleepers wake in deadline order when
    their clock passes their instant, so a test drives lease deadlines,
    renewals and challenge slots without sleeping.
    """

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._mono_ms = 0
        self._wall_offset_ms = start_ms
        self._order = itertools.count()
        # (instant on the sleeper's clock, order, waiter), one heap per clock
        self._wall_sleepers: list[tuple[int, int, asyncio.Future[None]]] = []
        self._mono_sleepers: list[tuple[int, int, asyncio.Future[None]]] = []

    def now_ms(self) -> int:
        """The clock's wall-clock time in epoch milliseconds."""
        return self._mono_ms + self._wall_offset_ms

    def monotonic_ms(self) -> int:
        """The clock's monotonic time: milliseconds advanced since it was made."""
        return self._mono_ms

    async def sleep_until(self, at_ms: int) -> None:
        """Wait until the wall clock reaches `at_ms`."""
        if at_ms <= self.now_ms():
            return
        await self._sleep(self._wall_sleepers, at_ms)

    async def sleep_until_monotonic(self, at_ms: int) -> None:
        """Wait until the monotonic clock reaches `at_ms`."""
        if at_ms <= self._mono_ms:
            return
        await self._sleep(self._mono_sleepers, at_ms)

    async def _sleep(self, heap: list[tuple[int, int, asyncio.Future[None]]], at: int) -> None:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(heap, (at, next(self._order), waiter))
        await waiter

    def advance(self, seconds: float) -> None:
        """Move both clocks forward by `seconds` and wake every sleeper now due."""
        self.advance_ms(round(seconds * 1000))

    def advance_ms(self, ms: int) -> None:
        """Move both clocks forward by `ms` milliseconds and wake those now due."""
        if ms < 0:
            raise ValueError("a ManualClock never moves backwards; step_wall steps the wall clock")
        self._mono_ms += ms
        self._wake()

    def step_wall(self, seconds: float) -> None:
        """Step only the wall clock by `seconds` (negative: back), as NTP does."""
        self._wall_offset_ms += round(seconds * 1000)
        self._wake()

    def _wake(self) -> None:
        for heap, now in ((self._mono_sleepers, self._mono_ms),
                          (self._wall_sleepers, self.now_ms())):
            while heap and heap[0][0] <= now:
                _, _, waiter = heapq.heappop(heap)
                if not waiter.done():
                    waiter.set_result(None)

    @property
    def next_wake_ms(self) -> int | None:
        """The earliest instant a sleeper waits for, on the wall clock; None when none waits."""
        for heap in (self._wall_sleepers, self._mono_sleepers):
            while heap and heap[0][2].done():
                heapq.heappop(heap)
        wakes = []
        if self._wall_sleepers:
            wakes.append(self._wall_sleepers[0][0])
        if self._mono_sleepers:
            wakes.append(self._mono_sleepers[0][0] + self._wall_offset_ms)
        return min(wakes, default=None)

"""Clocks: the wall clock records are written in, and the monotonic clock
local deadlines are measured on (tests drive both with
`krabka.testing.ManualClock`).

Two clocks, because they answer two questions. A lease record carries
wall-clock instants (epoch milliseconds) because other processes read them:
a challenger compares the holder's written deadline with its own wall clock,
so skew between members moves failover time by the size of the skew. The
leader's own fence deadline is a local duration, measured on the monotonic
clock from the moment its lease write was sent, so a step of the leader's
wall clock (NTP, a VM restored from a snapshot, an operator) can neither
extend nor shorten the time it trusts its lease. No clock takes part in the
broker's fence.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

__all__ = ["Clock", "SystemClock"]


class Clock(Protocol):
    """Wall-clock time for records, monotonic time for local deadlines."""

    def now_ms(self) -> int:
        """The current wall-clock time in epoch milliseconds."""
        ...

    async def sleep_until(self, at_ms: int) -> None:
        """Return once `now_ms()` has reached `at_ms` (a wall-clock instant)."""
        ...

    def monotonic_ms(self) -> int:
        """Milliseconds on a clock that never steps (its origin is arbitrary)."""
        ...

    async def sleep_until_monotonic(self, at_ms: int) -> None:
        """Return once `monotonic_ms()` has reached `at_ms`."""
        ...


class SystemClock:
    """The machine's wall clock and its monotonic clock."""

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

    def monotonic_ms(self) -> int:
        """`time.monotonic()` in milliseconds."""
        return time.monotonic_ns() // 1_000_000

    async def sleep_until_monotonic(self, at_ms: int) -> None:
        """Sleep until the monotonic clock reaches `at_ms`.

        asyncio's timers run on the monotonic clock, so one sleep suffices;
        the loop only absorbs the rounding to whole milliseconds.
        """
        while (remaining := at_ms - self.monotonic_ms()) > 0:  # noqa: ASYNC110
            await asyncio.sleep(remaining / 1000)

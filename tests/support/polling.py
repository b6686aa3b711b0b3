"""Waiting for a condition with a deadline: the only waiting integration tests do."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

POLL_INTERVAL = 0.05
"""Seconds between probes: how often to look, never how long an effect takes."""


async def eventually(probe: Callable[[], Awaitable[T]], done: Callable[[T], bool],
                     within: float) -> T:
    """Poll `probe` until `done(result)`; fail with the last result after `within` s."""
    deadline = time.monotonic() + within
    while True:
        result = await probe()
        if done(result):
            return result
        assert time.monotonic() < deadline, f"still {result!r} after {within} s"
        await asyncio.sleep(POLL_INTERVAL)

"""Helpers for tests that drive asyncio by hand."""

import asyncio


async def run_ready_callbacks(rounds: int = 20) -> None:
    """Let every task that is ready run until it blocks again.

    A scheduler yield, not a timed wait: with a ManualClock nothing becomes
    ready by waiting, so after this a task that is still pending is blocked.
    """
    for _ in range(rounds):
        await asyncio.sleep(0)

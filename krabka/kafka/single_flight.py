"""Callers that ask the same thing at the same time share one request.

A worker taking thousands of roles asks its transport's raw client for the
same things over and over within milliseconds: the state topic's metadata
for every new role producer, a role's coordinator for its producer and for
its resignation's warm-up at once. `SingleFlight` sends one request per key
while one is in flight and hands its outcome, answer or error, to every
caller that asked meanwhile. Written here because asyncio has no such
primitive and the request's outcome must survive any one caller's
cancellation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["SingleFlight"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SingleFlight(Generic[K, V]):
    """At most one call in flight per key; callers meanwhile share its outcome."""

    def __init__(self) -> None:
        self._flying: dict[K, asyncio.Future[V]] = {}

    async def do(self, key: K, call: Callable[[], Awaitable[V]]) -> V:
        """`call()`'s outcome, or that of the call for `key` already in flight."""
        flying = self._flying.get(key)
        if flying is None:
            flying = asyncio.ensure_future(call())
            self._flying[key] = flying

            def landed(done: asyncio.Future[V]) -> None:
                del self._flying[key]
                if not done.cancelled():
                    done.exception()  # retrieved: every caller may have gone

            flying.add_done_callback(landed)
        # Shielded: one caller's cancellation must not cancel the others' call.
        return await asyncio.shield(flying)

    async def close(self) -> None:
        """Cancel the calls in flight and wait for them to end; their callers
        get `asyncio.CancelledError`."""
        flying = list(self._flying.values())
        for call in flying:
            call.cancel()
        await asyncio.gather(*flying, return_exceptions=True)

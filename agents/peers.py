"""Asking another worker of the group over HTTP: `fetch_json`, and `Unreachable`
when it does not answer in time or not with JSON.

The rebalancing asks the other workers whether they are live, and the web view
forwards a request to the worker owning a role's partition; both answer an
unreachable worker on their own terms (the rebalancing counts it out, a view
answers 503).
"""

from __future__ import annotations

from typing import Any

import aiohttp

__all__ = ["FORWARD_TIMEOUT", "Unreachable", "fetch_json"]

FORWARD_TIMEOUT = 3.0


class Unreachable(Exception):
    """Another worker did not answer in time, or not with JSON."""


async def fetch_json(session: aiohttp.ClientSession, url: str,
                     seconds: float = FORWARD_TIMEOUT) -> tuple[int, Any]:
    """GET `url` from another worker: its status and JSON body, or `Unreachable`."""
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=seconds)) as response:
            return response.status, await response.json(content_type=None)
    except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
        raise Unreachable(f"{url}: {exc!r}") from None

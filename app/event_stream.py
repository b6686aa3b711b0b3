"""``GET /events/``: the leadership events as server-sent events (text/event-stream).

Each worker's fold publishes the events of the state partitions it owns
(`app.feed`). With ``scope=local`` a worker streams its own; without, it
streams every worker's: its own, and each other worker's ``scope=local``
stream relayed (the workers are those owning partitions, looked up again
every `PEER_CHECK` seconds, so a worker that joins is relayed from then on).
Either way a client is first sent each worker's recent events, then every
new one, one ``data:`` line of the event's JSON (docs/events.md) per event.

A client dedupes by ``(role, kind, offset)``: recent events are sent again
after every reconnect, and an event can repeat after a rebalance. The stream
ends (and an ``EventSource`` reconnects after ``retry``) when this client
falls too far behind, when a relayed worker's stream ends (it stopped, or
dropped us), or when this worker stops. ``: keepalive`` comments every
`HEARTBEAT` seconds keep proxies from closing an idle stream and let a gone
client be noticed.

aiohttp serves the stream (`web.StreamResponse`); the framing is written
here by hand: neither aiohttp nor Faust provides server-sent events, the
format is a few lines of the HTML standard (``data:``, ``retry:``, comments),
and the relay must parse it too, which the maintained server-side package
(aiohttp-sse) does not do (docs/decisions.md, "Watchers").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Collection
from typing import Any

import aiohttp
from aiohttp import web

from app.feed import QUEUE_SIZE, Dropped, EventFeed, Subscription

__all__ = ["HEARTBEAT", "PEER_CHECK", "RETRY_MS", "stream_events"]

log = logging.getLogger("app.event_stream")

HEARTBEAT = 15.0
"""Seconds between keepalive comments on an idle stream."""
RETRY_MS = 2000
"""How long an EventSource waits before it reconnects."""
PEER_CHECK = 5.0
"""Seconds between looks for workers to relay that are not relayed yet."""
CONNECT_TIMEOUT = 3.0

Peers = Callable[[], list[str]]
"""The base URLs of the other workers to relay."""


class _End(Exception):
    """The stream must end; the message says why."""


async def stream_events(request: web.Request, feed: EventFeed, *, peers: Peers | None,
                        session: Any, roles: Collection[str] = ()) -> web.StreamResponse:
    """Serve the events of `feed` (and of `peers`, relayed) until the stream ends."""
    wanted = frozenset(roles)
    response = web.StreamResponse(headers={
        "Content-Type": "text/event-stream",
        "Cache-Control": "no-cache",
        "X-Accel-Buffering": "no",  # a proxy that buffers would hold the events back
    })
    await response.prepare(request)
    await response.write(f"retry: {RETRY_MS}\n\n".encode())
    out: asyncio.Queue[bytes | _End] = asyncio.Queue(QUEUE_SIZE)

    def offer(item: bytes | _End) -> None:
        try:
            out.put_nowait(item)
        except asyncio.QueueFull:
            while not out.empty():
                out.get_nowait()
            out.put_nowait(_End(f"the client fell {QUEUE_SIZE} events behind"))

    subscription = feed.subscribe()
    tasks = [asyncio.ensure_future(_local(subscription, wanted, offer))]
    if peers is not None:
        tasks.append(asyncio.ensure_future(_relay_all(peers, session, wanted, offer)))
    try:
        while True:
            try:
                item = await asyncio.wait_for(out.get(), HEARTBEAT)
            except TimeoutError:
                await response.write(b": keepalive\n\n")
                continue
            if isinstance(item, _End):
                await response.write(f": end: {item}\n\n".encode())
                break
            await response.write(b"data: " + item + b"\n\n")
    except (ConnectionResetError, aiohttp.ClientConnectionResetError):
        pass  # the client went away
    finally:
        subscription.close()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
    return response


async def _local(subscription: Subscription, wanted: frozenset[str],
                 offer: Callable[[bytes | _End], None]) -> None:
    for event in subscription.replay:
        if not wanted or event.role in wanted:
            offer(event.encode())
    try:
        while True:
            event = await subscription.get()
            if not wanted or event.role in wanted:
                offer(event.encode())
    except Dropped as exc:
        offer(_End(f"this worker's feed ended: {exc}"))


async def _relay_all(peers: Peers, session: Any, wanted: frozenset[str],
                     offer: Callable[[bytes | _End], None]) -> None:
    relays: dict[str, asyncio.Task[None]] = {}
    try:
        while True:
            for url in peers():
                if url not in relays:
                    relays[url] = asyncio.ensure_future(_relay(url, session, wanted, offer))
            await asyncio.sleep(PEER_CHECK)
            for url, task in list(relays.items()):
                if task.done():
                    del relays[url]  # could not connect: tried again now
    finally:
        for task in relays.values():
            task.cancel()
        for task in relays.values():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


async def _relay(url: str, session: Any, wanted: frozenset[str],
                 offer: Callable[[bytes | _End], None]) -> None:
    query = [("scope", "local"), *(("role", role) for role in sorted(wanted))]
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT,
                                    sock_read=HEARTBEAT * 2)
    try:
        async with session.get(f"{url.rstrip('/')}/events/", params=query,
                               timeout=timeout) as answer:
            if answer.status != 200:
                log.warning("worker %s answered %d to /events/", url, answer.status)
                return
            data: list[bytes] = []
            async for line in answer.content:
                line = line.rstrip(b"\r\n")
                if line.startswith(b"data:"):
                    data.append(line[5:].lstrip(b" "))
                elif not line and data:
                    offer(b"\n".join(data))
                    data = []
    except (aiohttp.ClientError, TimeoutError) as exc:
        if not isinstance(exc, aiohttp.ClientConnectorError):
            offer(_End(f"the stream of worker {url} broke: {exc!r}"))
            return
        log.info("worker %s is not reachable for /events/: %r", url, exc)
        return
    offer(_End(f"the stream of worker {url} ended"))

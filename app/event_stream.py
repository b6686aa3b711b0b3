"""``GET /events/``: the leadership events as server-sent events (text/event-stream).

Each worker's fold publishes the events of the state partitions it owns
(`app.feed`). With ``scope=local`` a worker streams its own; without, it
streams every worker's: its own, and each other worker's ``scope=local``
stream relayed (the workers are those owning partitions, looked up again
every `PEER_CHECK` seconds, so a worker that joins is relayed from then on).
Either way a client is first sent each worker's recent events, then every
new one, one message of the event's JSON (docs/events.md) per event.

A client dedupes by ``(role, kind, offset)``: recent events are sent again
after every reconnect, and an event can repeat after a rebalance. The stream
ends, with an ``end`` event whose data says why (an ``EventSource``
reconnects after ``retry``, sent with the first message), when this client
falls too far behind, when a relayed worker's stream ends (it stopped, or
dropped us), or when this worker stops. A ``: ping`` comment every
`HEARTBEAT` seconds keeps proxies from closing an idle stream and lets a
gone client be noticed.

aio-libs' aiohttp-sse serves the stream: the framing, the headers (with
``X-Accel-Buffering: no``, so a proxy does not hold the events back), the
ping, and cutting off a client that stalls for 120 s (its send timeout).
The relay's parsing of a worker's stream is written here by hand: no
maintained client package exists (aiohttp-sse-client was last released in
2021), and the relay needs only ``data:`` and ``event:`` (docs/decisions/0019-watchers.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Collection
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp_sse import EventSourceResponse, sse_response

from app.feed import QUEUE_SIZE, Dropped, EventFeed, Subscription

__all__ = ["HEARTBEAT", "PEER_CHECK", "RETRY_MS", "stream_events"]

log = logging.getLogger("app.event_stream")

HEARTBEAT = 15.0
"""Seconds between ping comments."""
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
    out: asyncio.Queue[bytes | _End] = asyncio.Queue(QUEUE_SIZE)

    def offer(item: bytes | _End) -> None:
        try:
            out.put_nowait(item)
        except asyncio.QueueFull:
            while not out.empty():
                out.get_nowait()
            out.put_nowait(_End(f"the client fell {QUEUE_SIZE} events behind"))

    async with sse_response(request, ping_interval=HEARTBEAT) as response:
        subscription = feed.subscribe()
        sending = asyncio.ensure_future(_send(response, out))
        sending.add_done_callback(lambda _: response.stop_streaming())
        tasks = [asyncio.ensure_future(_local(subscription, wanted, offer))]
        if peers is not None:
            tasks.append(asyncio.ensure_future(_relay_all(peers, session, wanted, offer)))
        try:
            # Until the sending ends (stop_streaming), or aiohttp-sse's ping finds the
            # client gone: Faust's web server does not cancel the handler of a client
            # that left, so an idle stream would otherwise be served forever.
            await response.wait()
        finally:
            subscription.close()
            for task in [sending, *tasks]:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            with contextlib.suppress(asyncio.CancelledError):
                await sending  # a bug in it is raised, not hidden
    return response


async def _send(response: EventSourceResponse, out: asyncio.Queue[bytes | _End]) -> None:
    # aiohttp-sse sends a retry only with a message: the first one, whatever it is
    # (an EventSource keeps the value).
    retry: int | None = RETRY_MS
    try:
        while True:
            item = await out.get()
            if isinstance(item, _End):
                await response.send(str(item), event="end", retry=retry)
                return
            await response.send(item.decode(), retry=retry)
            retry = None
    except (ConnectionResetError, TimeoutError):
        pass  # the client went away, or stalled and aiohttp-sse cut it off


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
            kind = b""
            async for line in answer.content:
                line = line.rstrip(b"\r\n")
                if line.startswith(b"data:"):
                    data.append(line[5:].lstrip(b" "))
                elif line.startswith(b"event:"):
                    kind = line[6:].strip()
                elif not line:
                    if data and not kind:  # its `end` event is followed by the close
                        offer(b"\n".join(data))
                    data, kind = [], b""
    except (aiohttp.ClientError, TimeoutError) as exc:
        if not isinstance(exc, aiohttp.ClientConnectorError):
            offer(_End(f"the stream of worker {url} broke: {exc!r}"))
            return
        log.info("worker %s is not reachable for /events/: %r", url, exc)
        return
    offer(_End(f"the stream of worker {url} ended"))

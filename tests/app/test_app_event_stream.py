"""The live feed and ``GET /events/``, without Kafka: the fold's events fanned out
to subscribers that cannot hold it back, and served as server-sent events by
two workers' web apps (aiohttp's test server, a static partition map)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import aiohttp
import pytest

from agents.fold import apply_record
from app.event_stream import RETRY_MS
from app.feed import Dropped, EventFeed
from coordination import (
    STATE_TOPIC,
    LeadershipEvent,
    ManualClock,
    MemoryBroker,
    Registration,
    encode_key,
    encode_registration,
    registration_key,
    role_partition,
)
from tests.app.test_app_web import A_PARTS, B_PARTS, StaticRouter, Worker, roles_in
from tests.support.polling import eventually

PARTITIONS = 4
NOW = 1_700_000_000_000
WITHIN = 5  # seconds for an event to cross a local socket
A_ROLE = roles_in(A_PARTS, 1, "alpha")[0]
B_ROLE = roles_in(B_PARTS, 1, "beta")[0]


def event(role: str, offset: int, kind: str = "member-joined", member: str = "m",
          partition: int = 0) -> LeadershipEvent:
    return LeadershipEvent(role, kind, member, partition, offset, NOW + offset, rank=0)


# --- the feed -------------------------------------------------------------------------


async def test_every_subscriber_gets_the_recent_events_then_each_new_one():
    feed = EventFeed(history=2)
    for offset in range(3):
        feed.publish(event("r", offset))
    first, second = feed.subscribe(), feed.subscribe()
    assert [e.offset for e in first.replay] == [1, 2]  # the last `history` events
    feed.publish(event("r", 3))
    for subscription in (first, second):
        assert (await subscription.get()).offset == 3
    first.close()
    feed.publish(event("r", 4))
    assert feed.subscribers == 1
    assert (await second.get()).offset == 4


async def test_a_subscriber_that_falls_behind_is_dropped_and_the_others_get_everything():
    feed = EventFeed(queue_size=3)
    slow, keeping_up = feed.subscribe(), feed.subscribe()
    got = []
    for offset in range(10):
        feed.publish(event("r", offset))  # never waits, whoever reads or not
        got.append((await keeping_up.get()).offset)
    assert got == list(range(10))
    assert slow.dropped == "it fell 3 events behind"
    assert (feed.subscribers, feed.dropped) == (1, 1)
    with pytest.raises(Dropped, match="behind"):
        await slow.get()


async def test_closing_the_feed_wakes_every_waiting_subscriber():
    feed = EventFeed()
    subscription = feed.subscribe()
    waiting = asyncio.ensure_future(subscription.get())
    await asyncio.sleep(0)
    feed.close()
    with pytest.raises(Dropped, match="stopping"):
        await asyncio.wait_for(waiting, WITHIN)


def test_bad_bounds_are_refused():
    with pytest.raises(ValueError, match="queue_size"):
        EventFeed(queue_size=0)


# --- the fold publishes to the feed ---------------------------------------------------


class _Sent:
    def __init__(self) -> None:
        self.values: list[bytes] = []

    async def send(self, *, key: bytes, value: bytes, partition: int) -> None:
        self.values.append(value)


async def test_the_fold_hands_every_event_it_publishes_to_the_feed(two_workers):
    a, _, _ = two_workers
    topic = _Sent()
    a.ctx.events_topic = topic
    # Plain dicts: Faust's tables take writes only inside an agent's stream.
    a.ctx.tables = SimpleNamespace(role_state={}, partition_state={})
    subscription = a.ctx.feed.subscribe()
    partition = role_partition(A_ROLE, PARTITIONS)
    message = SimpleNamespace(
        partition=partition, offset=0, timestamp=NOW / 1000,
        key=encode_key(registration_key(A_ROLE, "x")),
        value=encode_registration(Registration("x", NOW)))
    await apply_record(a.ctx, message)
    published = await asyncio.wait_for(subscription.get(), WITHIN)
    assert (published.role, published.kind, published.member) == (A_ROLE, "member-joined", "x")
    assert topic.values == [published.encode()]


# --- GET /events/ ---------------------------------------------------------------------


@pytest.fixture
async def two_workers():
    clock = ManualClock(NOW)
    broker = MemoryBroker(clock=clock)
    broker.create_topic(STATE_TOPIC, PARTITIONS)
    a, b = Worker("a", clock, broker), Worker("b", clock, broker)
    owners = {a.url: sorted(A_PARTS), b.url: sorted(B_PARTS)}
    async with aiohttp.ClientSession() as session:
        for worker in (a, b):
            worker.ctx.router = StaticRouter(owners, worker.url)
            worker.ctx.http = session
            await worker.server.start_server()
        yield a, b, session
        for worker in (a, b):
            worker.ctx.feed.close()
            await worker.server.close()


class Stream:
    """A client of a server-sent events stream: its lines, read with a deadline."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response

    async def data(self) -> dict:
        """The next event's JSON (comments and other fields are skipped)."""
        async with asyncio.timeout(WITHIN):
            while True:
                line = (await self.response.content.readline()).decode().rstrip("\n")
                if line.startswith("data: "):
                    assert await self.response.content.readline() == b"\n"
                    return json.loads(line[len("data: "):])
                assert line == "" or line.startswith((":", "retry: ")), line

    async def comments_until_the_end(self) -> list[str]:
        async with asyncio.timeout(WITHIN):
            lines = (await self.response.content.read()).decode().splitlines()
        return [line for line in lines if line.startswith(":")]


async def open_stream(session, url: str) -> Stream:
    response = await session.get(url, timeout=aiohttp.ClientTimeout(total=None))
    assert response.status == 200
    assert response.content_type == "text/event-stream"
    assert response.headers["Cache-Control"] == "no-cache"
    assert await response.content.readline() == f"retry: {RETRY_MS}\n".encode()
    return Stream(response)


async def until_relayed(b, subscribers: int) -> None:
    """Wait until `b`'s feed has `subscribers` (the other worker's relay connected)."""
    async def count() -> int:
        return b.ctx.feed.subscribers

    await eventually(count, lambda n: n >= subscribers, WITHIN)


async def test_a_worker_streams_its_own_and_every_other_workers_events(two_workers):
    a, b, session = two_workers
    a.ctx.feed.publish(event(A_ROLE, 1))  # before the client came: sent first
    stream = await open_stream(session, f"{a.url}/events/")
    assert (await stream.data())["offset"] == 1
    await until_relayed(b, 1)
    b.ctx.feed.publish(event(B_ROLE, 7, kind="elected", member="b"))
    got = await stream.data()
    assert (got["role"], got["kind"], got["member"], got["offset"]) == (B_ROLE, "elected", "b", 7)
    assert got == json.loads(event(B_ROLE, 7, kind="elected", member="b").encode())
    a.ctx.feed.publish(event(A_ROLE, 2))
    assert (await stream.data())["offset"] == 2
    stream.response.close()


async def test_scope_local_streams_only_this_workers_events(two_workers):
    a, b, session = two_workers
    stream = await open_stream(session, f"{a.url}/events/?scope=local")
    b.ctx.feed.publish(event(B_ROLE, 7))
    a.ctx.feed.publish(event(A_ROLE, 2))
    assert (await stream.data())["role"] == A_ROLE
    assert b.ctx.feed.subscribers == 0  # nobody relays b into a local stream
    stream.response.close()


async def test_role_filters_the_stream_on_every_worker(two_workers):
    a, b, session = two_workers
    stream = await open_stream(session, f"{a.url}/events/?role={B_ROLE}")
    await until_relayed(b, 1)
    a.ctx.feed.publish(event(A_ROLE, 2))
    b.ctx.feed.publish(event(B_ROLE, 7))
    assert (await stream.data())["role"] == B_ROLE
    stream.response.close()


async def test_the_stream_ends_when_the_worker_stops(two_workers):
    a, _, session = two_workers
    stream = await open_stream(session, f"{a.url}/events/?scope=local")
    await asyncio.sleep(0)
    a.ctx.feed.close()  # what the web server's shutdown does first
    assert await stream.comments_until_the_end() == [
        ": end: this worker's feed ended: the worker is stopping"]


async def test_the_stream_ends_when_a_relayed_worker_stops(two_workers):
    a, b, session = two_workers
    stream = await open_stream(session, f"{a.url}/events/")
    await until_relayed(b, 1)
    b.ctx.feed.close()
    comments = await stream.comments_until_the_end()
    assert comments == [f": end: the stream of worker {b.url} ended"]


async def test_a_bad_role_filter_is_a_400(two_workers):
    a, _, session = two_workers
    async with session.get(f"{a.url}/events/?role=") as response:
        assert response.status == 400
        assert "role name" in (await response.json())["error"]


async def test_the_web_servers_shutdown_ends_the_open_streams_first(two_workers):
    a, _, session = two_workers
    stream = await open_stream(session, f"{a.url}/events/?scope=local")
    await asyncio.sleep(0)
    closing = asyncio.ensure_future(a.server.close())  # aiohttp's shutdown: on_shutdown first
    assert await stream.comments_until_the_end() == [
        ": end: this worker's feed ended: the worker is stopping"]
    await asyncio.wait_for(closing, WITHIN)

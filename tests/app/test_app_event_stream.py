"""The live feed and ``GET /events/``, without Kafka: the fold's events fanned out
to subscribers that cannot hold it back, and served as server-sent events by
two workers' web apps (aiohttp's test server, a static partition map)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import aiohttp
import pytest
from aiohttp import web

from agents.fold.agent import apply_batch
from app.web.event_stream import RETRY_MS
from app.web.feed import Dropped, EventFeed
from krabka import (
    STATE_TOPIC,
    LeadershipEvent,
    Record,
    Registration,
    encode_key,
    encode_registration,
    registration_key,
    role_partition,
)
from krabka.testing import ManualClock, MemoryBroker
from tests.app.test_app_web import A_PARTS, B_PARTS, StaticRouter, Worker, roles_in
from tests.support.faust_events import state_event
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
    record = Record(0, encode_key(registration_key(A_ROLE, "x")),
                    encode_registration(Registration("x", NOW)), NOW)
    await apply_batch(a.ctx, [state_event(record, partition)])
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
    """A client of a server-sent events stream: its messages, read with a deadline
    (comments skipped, ``retry`` fields kept aside in `retries`)."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response
        self.retries: list[int] = []

    async def message(self) -> dict[str, str]:
        """The next message's fields; none once the stream has ended."""
        fields: dict[str, str] = {}
        async with asyncio.timeout(WITHIN):
            while raw := await self.response.content.readline():
                line = raw.decode().rstrip("\r\n")
                if line.startswith(":"):
                    continue
                if line.startswith("retry: "):
                    self.retries.append(int(line[len("retry: "):]))
                elif line:
                    name, _, value = line.partition(": ")
                    assert name not in fields, line  # one data line per message
                    fields[name] = value
                elif fields:
                    return fields
        assert not fields, fields  # a message cut by the end of the stream
        return fields

    async def data(self) -> dict:
        """The next event's JSON."""
        message = await self.message()
        assert list(message) == ["data"], message
        return json.loads(message["data"])

    async def until_the_end(self) -> list[dict[str, str]]:
        """The messages left, once the stream has ended."""
        messages = []
        while message := await self.message():
            messages.append(message)
        return messages


async def open_stream(session, url: str) -> Stream:
    response = await session.get(url, timeout=aiohttp.ClientTimeout(total=None))
    assert response.status == 200
    assert response.content_type == "text/event-stream"
    assert response.headers["Cache-Control"] == "no-cache"
    assert response.headers["X-Accel-Buffering"] == "no"  # a buffering proxy holds events back
    return Stream(response)


def end(why: str) -> list[dict[str, str]]:
    """What a client is sent last: the `end` event, its data saying why."""
    return [{"event": "end", "data": why}]


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
    assert stream.retries == [RETRY_MS]  # with the first message only
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
    assert await stream.until_the_end() == end(
        "this worker's feed ended: the worker is stopping")
    assert stream.retries == [RETRY_MS]  # sent even when no event was


async def test_the_stream_ends_when_a_relayed_worker_stops(two_workers):
    a, b, session = two_workers
    stream = await open_stream(session, f"{a.url}/events/")
    await until_relayed(b, 1)
    b.ctx.feed.close()
    # b's own `end` event is not relayed as an event: a's follows it.
    assert await stream.until_the_end() == end(f"the stream of worker {b.url} ended")


async def test_a_client_that_falls_behind_is_sent_the_end_rather_than_waited_for(
        two_workers, monkeypatch):
    a, _, session = two_workers
    monkeypatch.setattr("app.web.event_stream.QUEUE_SIZE", 2)
    for offset in range(5):
        a.ctx.feed.publish(event(A_ROLE, offset))  # replayed faster than it can be sent
    stream = await open_stream(session, f"{a.url}/events/?scope=local")
    assert await stream.until_the_end() == end("the client fell 2 events behind")


async def test_an_idle_stream_carries_a_ping_comment_which_finds_a_gone_client(monkeypatch):
    """On a server that, as Faust's web driver runs it, does not cancel the handler
    of a client that went away (aiohttp's test server does)."""
    monkeypatch.setattr("app.web.event_stream.HEARTBEAT", 0.05)
    broker = MemoryBroker(clock=ManualClock(NOW))
    broker.create_topic(STATE_TOPIC, PARTITIONS)
    worker = Worker("c", ManualClock(NOW), broker)
    runner = web.AppRunner(worker.ctx.app.web.web_app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", worker.port).start()
        async with aiohttp.ClientSession() as session:
            stream = await open_stream(session, f"{worker.url}/events/?scope=local")
            line = await asyncio.wait_for(stream.response.content.readline(), WITHIN)
            assert line.rstrip(b"\r\n") == b": ping"
            assert worker.ctx.feed.subscribers == 1
            stream.response.close()

            async def subscribers() -> int:
                return worker.ctx.feed.subscribers

            await eventually(subscribers, lambda n: n == 0, WITHIN)  # its stream ended
    finally:
        worker.ctx.feed.close()
        await runner.cleanup()


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
    assert await stream.until_the_end() == end(
        "this worker's feed ended: the worker is stopping")
    await asyncio.wait_for(closing, WITHIN)

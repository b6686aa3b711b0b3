"""A client's bootstrap, once started, ends before a cancellation is raised.

aiokafka's ``bootstrap()`` cancelled while it waits for metadata leaves its
connection open; `guard_bootstrap` lets it finish within a grace first (the
real-broker tests in tests/kafka check the connections themselves).
"""

from __future__ import annotations

import asyncio

import pytest

from krabka.kafka.lifecycle import guard_bootstrap
from tests.support.loop import run_ready_callbacks


class Client:
    """A stand-in for ``AIOKafkaClient``: its bootstrap waits for `metadata`."""

    def __init__(self) -> None:
        self.metadata: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.ended: str | None = None

    async def bootstrap(self) -> None:
        try:
            await self.metadata
        except asyncio.CancelledError:
            self.ended = "cancelled"
            raise
        self.ended = "finished"


async def test_a_cancelled_bootstrap_finishes_before_the_cancellation_is_raised() -> None:
    client = Client()
    guard_bootstrap(client)
    starting = asyncio.ensure_future(client.bootstrap())
    await run_ready_callbacks()
    starting.cancel()
    await run_ready_callbacks()
    assert not starting.done()
    assert client.ended is None
    client.metadata.set_result(None)
    with pytest.raises(asyncio.CancelledError):
        await starting
    assert client.ended == "finished"


async def test_a_bootstrap_that_outlasts_the_grace_is_cut_short() -> None:
    client = Client()
    guard_bootstrap(client, grace=0.01)
    starting = asyncio.ensure_future(client.bootstrap())
    await run_ready_callbacks()
    starting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(starting, 5)
    assert client.ended == "cancelled"


async def test_a_bootstrap_not_cancelled_gives_its_own_outcome() -> None:
    client = Client()
    guard_bootstrap(client)
    starting = asyncio.ensure_future(client.bootstrap())
    await run_ready_callbacks()
    client.metadata.set_exception(ConnectionRefusedError("no broker"))
    with pytest.raises(ConnectionRefusedError, match="no broker"):
        await starting

"""Starting and stopping aiokafka clients within a bound.

aiokafka's ``start()`` can wait forever once bootstrap succeeded (a producer's
FindCoordinator/InitProducerId loop has no deadline), and ``stop()`` waits for
pending batches to flush, forever in an outage. A ``stop()`` that is cancelled
has already set ``_closed``, so a second ``stop()`` returns at once without
closing the client: its tasks and sockets leak. So every start here is bounded
and turned into a clear error, and every stop is bounded and, if it did not
finish, completed by hand (sender or fetcher task, then the network client).
What a stop by hand reads and writes of aiokafka's internals is in
`krabka.kafka.aiokafka_internals`.

A client's ``bootstrap()`` is the one step a cancellation must not cut short:
it holds its first connection in a local variable while it asks for the
cluster's metadata, and cancelled there it leaves that connection to the
garbage collector, which logs "Unclosed AIOKafkaConnection" at ERROR (dozens
of times at each start of a worker group, whose standbys discard clients as
ranks move; once in a worker stopped as it started). `guard_bootstrap` lets a
cancelled bootstrap finish within `BOOTSTRAP_GRACE` first, so the stop that
follows closes everything.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable
from typing import Any

from aiokafka import errors as _errors  # type: ignore[import-untyped, unused-ignore]

from krabka.kafka.aiokafka_internals import (
    admin_network_client,
    close_consumer_by_hand,
    close_producer_by_hand,
    consumer_network_client,
    fetch_task,
    pending_fetch_tasks,
    sender_task,
)
from krabka.kafka.errors import KafkaUnavailableError
from krabka.runtime.cancellation import bounded, cancel_and_wait

__all__ = [
    "BOOTSTRAP_GRACE",
    "CLOSE_TIMEOUT",
    "guard_bootstrap",
    "servers_text",
    "start_bounded",
    "stop_admin",
    "stop_client",
    "stop_consumer",
    "stop_producer",
]

log = logging.getLogger("krabka.kafka")

CLOSE_TIMEOUT = 5.0
"""Seconds a graceful stop may take before the client is closed by hand."""


BOOTSTRAP_GRACE = 1.0
"""Seconds a cancelled bootstrap may take to finish before it is cut short.

A broker answers Metadata in milliseconds; one that takes longer is in
trouble, and waiting for it would only delay the cancellation."""


def guard_bootstrap(client: Any, grace: float = BOOTSTRAP_GRACE) -> None:
    """Make `client`'s ``bootstrap()`` finish, within `grace`, when cancelled.

    `client` is an ``AIOKafkaClient`` not yet started (a producer's
    ``client``, a consumer's or an admin client's ``_client``). Its
    ``bootstrap`` is replaced on the instance, so the client's own start
    (``producer.start()``, ``consumer.start()``, ``admin.start()``) calls the
    guarded one. The cancellation is raised once the bootstrap has ended;
    the caller's stop then closes the connections it kept.
    """
    bootstrap = client.bootstrap

    async def finished_when_cancelled() -> None:
        work = asyncio.ensure_future(bootstrap())
        try:
            await asyncio.shield(work)
        except asyncio.CancelledError:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({work}, timeout=grace)
            if not work.done():
                await cancel_and_wait(work)
            elif not work.cancelled():
                work.exception()  # retrieved: the cancellation is what the caller gets
            raise

    client.bootstrap = finished_when_cancelled


def servers_text(bootstrap_servers: str | list[str]) -> str:
    """Bootstrap servers as the user wrote them, for error messages."""
    if isinstance(bootstrap_servers, str):
        return bootstrap_servers
    return ",".join(bootstrap_servers)


async def start_bounded(start: Awaitable[Any], limit: float, what: str, servers: str) -> None:
    """Await `start` for at most `limit` seconds; unreachable is `KafkaUnavailableError`."""
    try:
        await bounded(start, limit)
    except TimeoutError as exc:
        raise KafkaUnavailableError(
            f"{what}: no answer from the Kafka cluster at {servers} within {limit:g} s; "
            "check that the brokers and the transaction coordinator are up and reachable"
        ) from exc
    except _errors.KafkaConnectionError as exc:
        raise KafkaUnavailableError(
            f"{what}: cannot connect to the Kafka cluster at {servers} ({exc}); "
            "check bootstrap_servers and that a broker listens there"
        ) from exc


async def _graceful(stop: Awaitable[Any], limit: float, what: str) -> bool:
    try:
        await bounded(stop, limit)
        return True
    except TimeoutError:
        log.warning("%s did not stop within %g s; closing it by hand", what, limit)
    except Exception as exc:
        log.warning("%s failed to stop (%r); closing it by hand", what, exc)
    return False


async def _wait_task(task: asyncio.Task[Any] | None, limit: float) -> None:
    if task is None or task.done():
        return
    task.cancel()
    await asyncio.wait({task}, timeout=limit)


async def _close_network(client: Any, limit: float) -> None:
    with contextlib.suppress(Exception):
        await bounded(client.close(), limit)


async def stop_producer(producer: Any, limit: float = CLOSE_TIMEOUT) -> None:
    """Stop `producer`; pending deliveries fail instead of waiting forever."""
    stopped = False
    try:
        stopped = await _graceful(producer.stop(), limit, "a Kafka producer")
    finally:
        if not stopped:
            # Fail what is still queued, so nobody awaits a delivery forever.
            with contextlib.suppress(Exception):
                close_producer_by_hand(producer, _errors.KafkaError("the producer was closed"))
            await _wait_task(sender_task(producer), limit)
            await _close_network(producer.client, limit)


async def stop_consumer(consumer: Any, limit: float = CLOSE_TIMEOUT) -> None:
    """Stop `consumer` (no group, so nothing to commit or leave)."""
    stopped = False
    try:
        stopped = await _graceful(consumer.stop(), limit, "a Kafka consumer")
    finally:
        if not stopped:
            close_consumer_by_hand(consumer)
            await _wait_task(fetch_task(consumer), limit)
            for task in pending_fetch_tasks(consumer):
                await _wait_task(task, limit)
            await _close_network(consumer_network_client(consumer), limit)


async def stop_admin(admin: Any, limit: float = CLOSE_TIMEOUT) -> None:
    """Close an admin client."""
    stopped = False
    try:
        stopped = await _graceful(admin.close(), limit, "a Kafka admin client")
    finally:
        if not stopped:
            await _close_network(admin_network_client(admin), limit)


async def stop_client(client: Any, limit: float = CLOSE_TIMEOUT) -> None:
    """Close a raw network client."""
    await _close_network(client, limit)

"""Requests to a role's transaction coordinator over a raw aiokafka client.

`describe` is DescribeTransactions (API 65) and `init_producer_id` the
conditional InitProducerId v3+/v4 (KIP-360): aiokafka defines neither, so
their classes live in `krabka.kafka.protocol.messages`. Both go to the broker
FindCoordinator (key type 1) names for ``transactional.id = role``; the answer
is cached per role, so a describe is one round trip. A coordinator that moved
(15 COORDINATOR_NOT_AVAILABLE, 16 NOT_COORDINATOR, or a connection that fails)
is looked up again; one still loading (14) or finishing a transaction (51
CONCURRENT_TRANSACTIONS, InitProducerId only) is retried after a short backoff.
Every call is bounded by the transport's operation timeout, in the caller's
task (`krabka.runtime.cancellation.within`, which also delivers a cancellation
aiokafka's request dropped): a describe of a started transport creates no
task and takes no lock.
`warm` looks a role's coordinator up ahead of need, in the background: a new
leader's resignation starts with a describe and a conditional bump, and
without it the client's start and the lookup (about 6 ms on one machine)
would sit on the handover's path.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from aiokafka import errors as _errors  # type: ignore[import-untyped, unused-ignore]
from aiokafka.client import (  # type: ignore[import-untyped, unused-ignore]
    AIOKafkaClient,
    CoordinationType,
)
from aiokafka.protocol.metadata import (  # type: ignore[import-untyped, unused-ignore]
    MetadataRequest,
)

from krabka.kafka.errors import KafkaTransportError, KafkaUnavailableError
from krabka.kafka.lifecycle import guard_bootstrap, start_bounded, stop_client
from krabka.kafka.options import ClientOptions
from krabka.kafka.producer.seeded import SharedMetadata
from krabka.kafka.protocol.messages import (
    CONCURRENT_TRANSACTIONS,
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    NOT_COORDINATOR,
    ApiVersionsRequest,
    BrokerApiVersions,
    DescribeTransactionsRequest,
    InitProducerIdRequest,
    InitProducerIdResult,
    TransactionDescription,
    parse_api_versions,
    parse_describe_transactions,
    parse_init_producer_id,
)
from krabka.kafka.single_flight import SingleFlight
from krabka.runtime.cancellation import within

__all__ = ["TransactionCoordinators"]

T = TypeVar("T")

log = logging.getLogger("krabka.kafka")

_MOVED = frozenset({COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR})
_BUSY = frozenset({COORDINATOR_LOAD_IN_PROGRESS})
_FIRST_BACKOFF = 0.002
_MAX_BACKOFF = 0.5
# Failures after which the coordinator is looked up again.
_LOST_NODE = (_errors.NodeNotReadyError, _errors.KafkaConnectionError,
              _errors.RequestTimedOutError)


class _Retry(Exception):
    """Internal: try again, after looking the coordinator up if `moved`."""

    def __init__(self, moved: bool) -> None:
        self.moved = moved


class TransactionCoordinators:
    """Finds and asks transaction coordinators; one raw client per transport."""

    def __init__(self, options: ClientOptions, *, timeout: float, servers: str) -> None:
        self._options = options
        self._timeout = timeout
        self._servers = servers
        self._client: Any = None
        self._start_lock = asyncio.Lock()
        self._nodes: dict[str, int] = {}
        self._finding: SingleFlight[str, int] = SingleFlight()
        self._metadata = SharedMetadata(self._ask_metadata)
        self._warming: set[asyncio.Task[None]] = set()

    async def describe(self, role: str) -> TransactionDescription:
        """DescribeTransactions for `role`; error 105 comes back in the entry."""

        def parse(response: Any) -> TransactionDescription:
            (entry,) = parse_describe_transactions(response)
            if entry.error_code in _MOVED:
                raise _Retry(moved=True)
            if entry.error_code in _BUSY:
                raise _Retry(moved=False)
            return entry

        return await self._ask(role, f"describing role {role!r}",
                               lambda: DescribeTransactionsRequest([role]), parse)

    async def init_producer_id(
        self, role: str, transaction_timeout_ms: int, producer_id: int, producer_epoch: int
    ) -> InitProducerIdResult:
        """InitProducerId v4 (v3) carrying the caller's pair: KIP-360's conditional bump."""

        def parse(response: Any) -> InitProducerIdResult:
            result = parse_init_producer_id(response)
            if result.error_code in _MOVED:
                raise _Retry(moved=True)
            # 51: the coordinator is aborting the role's open transaction; the
            # retry with the same pair bumps once (the abort's bump is its "retry").
            if result.error_code in _BUSY or result.error_code == CONCURRENT_TRANSACTIONS:
                raise _Retry(moved=False)
            return result

        return await self._ask(
            role, f"conditional InitProducerId for role {role!r}",
            lambda: InitProducerIdRequest(role, transaction_timeout_ms, producer_id,
                                          producer_epoch),
            parse,
        )

    async def api_versions(self) -> BrokerApiVersions:
        """ApiVersions v3+ of one broker: its API ranges and the finalized features."""
        client = await self._started()

        async def ask() -> BrokerApiVersions:
            node = client.get_random_node()
            return parse_api_versions(await client.send(node, ApiVersionsRequest()))

        return await self._bounded(ask(), "ApiVersions")

    async def close(self) -> None:
        warming = list(self._warming)
        for task in warming:
            task.cancel()
        await asyncio.gather(*warming, self._finding.close(), self._metadata.close(),
                             return_exceptions=True)
        client, self._client = self._client, None
        if client is not None:
            await stop_client(client)

    async def coordinator(self, role: str) -> int:
        """The broker that is `role`'s transaction coordinator (looked up once per role)."""
        client = await self._started()
        return await self._bounded(self._coordinator(client, role),
                                   f"finding the coordinator of role {role!r}")

    async def topic_metadata(self, topic: str) -> Any:
        """A Metadata response for `topic`, shared (`krabka.kafka.producer.seeded`)."""
        return await self._metadata.get(topic)

    async def _ask_metadata(self, topics: Iterable[str]) -> Any:
        client = await self._started()
        node = client.get_random_node()
        if node is None:
            raise KafkaUnavailableError(f"no broker known to ask for metadata "
                                        f"(cluster {self._servers})")
        # Never creating: the transport has checked that the topic exists, and a
        # topic deleted since must not come back with the broker's defaults.
        request = MetadataRequest(list(topics), allow_auto_topic_creation=False)
        return await self._bounded(client.send(node, request), "reading the state topic's metadata")

    def warm(self, role: str) -> None:
        """Start the client and find `role`'s coordinator in the background.

        Best effort: a failure is logged and the next request finds the
        coordinator itself.
        """
        if role in self._nodes:
            return
        task = asyncio.ensure_future(self._warm(role))
        self._warming.add(task)
        task.add_done_callback(self._warming.discard)

    async def _warm(self, role: str) -> None:
        try:
            client = await self._started()
            node = await self._bounded(self._coordinator(client, role),
                                       f"finding the coordinator of role {role!r}")
            await self._bounded(client.ready(node), f"connecting to the coordinator of {role!r}")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.debug("%s: could not find the transaction coordinator ahead of need: %r",
                      role, exc)

    async def _started(self) -> Any:
        # The lock only keeps two first calls from starting two clients: once
        # one is up, an authority check reads it without waiting on the lock.
        if self._client is not None:
            return self._client
        async with self._start_lock:
            if self._client is None:
                client = AIOKafkaClient(**self._options.client())
                guard_bootstrap(client)
                try:
                    await start_bounded(client.bootstrap(), self._timeout,
                                        "connecting to the transaction coordinator",
                                        self._servers)
                except BaseException:
                    await stop_client(client)
                    raise
                self._client = client
            return self._client

    async def _bounded(self, work: Awaitable[T], what: str) -> T:
        # In the caller's task (`within`): a task per call would be on the
        # path of every authority check.
        try:
            return await within(work, self._timeout)
        except TimeoutError as exc:
            raise KafkaUnavailableError(
                f"{what}: no answer from the transaction coordinator within "
                f"{self._timeout:g} s (cluster {self._servers})"
            ) from exc

    async def _ask(
        self, role: str, what: str, request: Callable[[], Any], parse: Callable[[Any], T]
    ) -> T:
        client = await self._started()

        async def attempt_until_done() -> T:
            backoff = _FIRST_BACKOFF
            while True:
                try:
                    node = await self._coordinator(client, role)
                    try:
                        response = await client.send(node, request())
                    except _LOST_NODE as exc:
                        raise _Retry(moved=True) from exc
                    return parse(response)
                except _Retry as retry:
                    if retry.moved:
                        self._nodes.pop(role, None)
                        client.force_metadata_update()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF)

        try:
            return await self._bounded(attempt_until_done(), what)
        except _errors.KafkaError as exc:
            raise KafkaTransportError(f"{what} failed: {exc!r}") from exc

    async def _coordinator(self, client: Any, role: str) -> int:
        node = self._nodes.get(role)
        if node is not None:
            return node
        # A new role's producer and its resignation's warm-up ask at the same
        # instant: they share one FindCoordinator.
        return await self._finding.do(role, lambda: self._find(client, role))

    async def _find(self, client: Any, role: str) -> int:
        try:
            node = int(await client.coordinator_lookup(CoordinationType.TRANSACTION, role))
        except _errors.BrokerResponseError as exc:
            if exc.errno in _MOVED or exc.errno in _BUSY:
                raise _Retry(moved=False) from exc
            raise
        except _LOST_NODE as exc:
            raise _Retry(moved=True) from exc
        self._nodes[role] = node
        return node

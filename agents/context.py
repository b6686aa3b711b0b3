"""What the worker's agents, role service and rebalancing are given by the
composition root: `AgentContext`, the parts of one worker they use.

The composition root (`app.install`) builds one `app.context.Context` with
every part and hands it to them; they see it through this protocol, so the
agents import nothing of `app` (tests/app/test_worker_layers.py holds this).
The settings, metrics and event feed appear as the few members the agents use
of them. A leaf: it imports only the library, Faust's and aiohttp's types and
the fold's due index.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Protocol

import aiohttp
import faust
from faust.types import TableT, TopicT

from agents.fold.due import DueIndex
from krabka import LeaderRunner, LeadershipOptions, Rebalancer, RoleFunction, Transport
from krabka.clock import Clock
from krabka.observe.events import LeadershipEvent

__all__ = ["AgentContext", "AgentMetrics", "AgentSettings", "EventSink", "Router", "Tables",
           "TransportFactory"]

TransportFactory = Callable[[], AbstractAsyncContextManager[Transport]]


class Tables(Protocol):
    """The worker's two changelog-backed tables (declared by `tables.faust_tables`)."""

    @property
    def role_state(self) -> TableT[bytes, bytes]:
        """Key: the role's UTF-8 bytes; value: `agents.fold.role_value`'s codec."""
        ...

    @property
    def partition_state(self) -> TableT[bytes, bytes]:
        """Key: the partition's digits; value: `agents.fold.partition_value`'s codec."""
        ...


class Router(Protocol):
    """The partition -> worker map the views and the rebalancing route by."""

    def owners(self) -> dict[str, list[int]]:
        """Each worker's URL and the state partitions it owns (empty while unassigned)."""
        ...

    def is_self(self, url: str) -> bool:
        """Whether `url` is this worker's web server."""
        ...


class AgentSettings(Protocol):
    """The worker's settings, as the agents read them (`app.settings.Settings`)."""

    @property
    def term_mode(self) -> bool: ...

    @property
    def tick_interval(self) -> float: ...

    @property
    def rebalance_interval(self) -> float: ...

    @property
    def rebalancing_off(self) -> str | None: ...

    @property
    def placement(self) -> str: ...

    @property
    def admission_limit(self) -> float: ...

    @property
    def admission_rate(self) -> float: ...

    @property
    def metrics_per_role_limit(self) -> int: ...

    @property
    def renew_interval(self) -> float: ...

    @property
    def leadership_options(self) -> LeadershipOptions: ...

    def role_options(self, outputs: Iterable[str] = ()) -> LeadershipOptions: ...


class AgentMetrics(Protocol):
    """The worker's metrics the agents and the role service report to (`app.metrics`)."""

    def stand_for(self, roles: Collection[str], per_role_limit: int) -> None: ...

    def leading(self, role: str, leading: bool) -> None: ...

    def fenced(self, role: str) -> None: ...

    def resigned(self, role: str) -> None: ...

    def lost(self, role: str, reason: str) -> None: ...

    def lease_written(self, role: str, seconds: float) -> None: ...

    def handed_over(self) -> None: ...

    def event(self, kind: str) -> None: ...

    def skip(self, partition: int, reason: str) -> None: ...


class EventSink(Protocol):
    """Where the fold publishes each event for the web view's live stream."""

    def publish(self, event: LeadershipEvent) -> None: ...


class AgentContext(Protocol):
    """One worker's parts, as its agents, role service and rebalancing use them."""

    @property
    def settings(self) -> AgentSettings: ...

    @property
    def app(self) -> faust.App: ...

    @property
    def tables(self) -> Tables: ...

    @property
    def state_topic(self) -> TopicT: ...

    @property
    def events_topic(self) -> TopicT: ...

    @property
    def ticks_topic(self) -> TopicT: ...

    @property
    def terms_topic(self) -> TopicT | None: ...

    @property
    def router(self) -> Router: ...

    @property
    def transport_factory(self) -> TransportFactory: ...

    @property
    def roles(self) -> Mapping[str, RoleFunction]: ...

    @property
    def outputs(self) -> Mapping[str, tuple[str, ...]]: ...

    @property
    def metrics(self) -> AgentMetrics: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def feed(self) -> EventSink: ...

    @property
    def http(self) -> aiohttp.ClientSession | None: ...

    @property
    def runners(self) -> dict[str, LeaderRunner]: ...

    @property
    def due(self) -> DueIndex: ...

    @property
    def fold_lock(self) -> asyncio.Lock: ...

    @property
    def member(self) -> str: ...

    @property
    def partitions(self) -> int: ...

    transport: Transport | None
    """Set by the role service once it has connected (None until then)."""
    rebalancer: Rebalancer | None
    """Set by the rebalancing once the role service has connected."""
    rebalancing_ended: str | None
    """Set by the rebalancing when a bug ends it: why (``GET /rebalance/``'s `off`)."""

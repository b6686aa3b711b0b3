"""What the parts of one worker share: settings, the Faust app, tables, topics,
metrics, the coordination transport and the role runners.

Built once by `app.factory.build`; the views, agents and services receive it
instead of importing module globals, so tests build as many as they need.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

import faust

from agents.roles import RoleFunction, RoleRunner
from app.metrics import Metrics
from app.settings import Settings
from coordination import Clock, SystemClock, Transport
from tables.faust_tables import Tables

__all__ = ["Context", "TransportFactory"]

TransportFactory = Callable[[], AbstractAsyncContextManager[Transport]]


@dataclass(eq=False)
class Context:
    """One worker's shared parts."""

    settings: Settings
    app: faust.App
    tables: Tables
    state_topic: Any
    events_topic: Any
    ticks_topic: Any
    transport_factory: TransportFactory
    roles: dict[str, RoleFunction]
    metrics: Metrics = field(default_factory=Metrics)
    clock: Clock = field(default_factory=SystemClock)
    transport: Transport | None = None
    """The started transport (None until the role service has connected)."""
    runners: dict[str, RoleRunner] = field(default_factory=dict)
    router: Any = None
    """Who owns which partition (`app.routing.Router`); set by `app.web.install`."""
    http: Any = None
    """The aiohttp session for asking other workers (default: Faust's ``http_client``)."""

    @property
    def member(self) -> str:
        """This worker's member id (follows a ``--web-port`` given to the worker)."""
        return self.settings.member(self.app.conf.web_port)

    @property
    def partitions(self) -> int:
        """The state topic's partition count."""
        return self.settings.partitions

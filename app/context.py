"""What the parts of one worker share: settings, the Faust app, tables, topics,
the partition router, metrics, the live event feed, the coordination transport and the
role runners.

A leaf of the worker: it imports no agent and no table module, only the
library, Faust's and aiohttp's types, the agents' own description of what they
are given (`agents.context`, which `Context` satisfies) with the fold's due
index, and the settings, metrics, feed and readiness modules (which import no
worker module; tests/app/test_worker_layers.py holds this). `app.install`, the
composition root, builds one `Context` with every part and hands it to the
agents, the role service and the web view, so tests build as many workers as
they need.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field

import aiohttp
import faust
from faust.types import TopicT

from agents.context import Router, Tables, TransportFactory
from agents.fold.due import DueIndex
from app.metrics import Metrics
from app.readiness import ClusterWatch, ReadinessBounds
from app.settings import Settings
from app.web.feed import EventFeed
from krabka import LeaderRunner, Rebalancer, RoleFunction, Transport
from krabka.clock import Clock, SystemClock

__all__ = ["Context"]


@dataclass(eq=False)
class Context:
    """One worker's shared parts.

    Everything but `transport`, `runners` and `rebalancer` is set at
    construction; those are the role service's, filled once it has connected.
    """

    settings: Settings
    app: faust.App
    tables: Tables
    state_topic: TopicT
    events_topic: TopicT
    ticks_topic: TopicT
    router: Router
    transport_factory: TransportFactory
    roles: Mapping[str, RoleFunction]
    """The roles this worker stands for, by name (may grow until the service starts)."""
    cluster: ClusterWatch
    """What the readiness probe learnt of the cluster (on `clock`)."""
    readiness: ReadinessBounds
    outputs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Each role's declared output topics (``installation.role(..., outputs=...)``)."""
    terms_topic: TopicT | None = None
    """Term mode's ``__coordination_terms``, folded beside the state topic (None in epoch mode)."""
    metrics: Metrics = field(default_factory=Metrics)
    clock: Clock = field(default_factory=SystemClock)
    feed: EventFeed = field(default_factory=EventFeed)
    """The events this worker's fold publishes, for the web view's live stream."""
    http: aiohttp.ClientSession | None = None
    """The session for asking other workers (None: Faust's ``http_client``)."""
    transport: Transport | None = None
    """The started transport (None until the role service has connected)."""
    runners: dict[str, LeaderRunner] = field(default_factory=dict)
    """The role service's runner per role (empty until it has connected)."""
    rebalancer: Rebalancer | None = None
    """The rebalancing of this worker's balanced roles (None until the role service has
    connected, and for good when `Settings.rebalancing_off` says why; agents.rebalancing)."""
    rebalancing_ended: str | None = None
    """Why this worker's rebalancing ended while the worker runs (a bug), if it did."""
    due: DueIndex = field(default_factory=DueIndex)
    """When each role's value next has a lapse for the tick agent to report
    (`agents.fold.agent`)."""
    fold_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held by the fold, terms and tick agents around a read, update and write of a
    role's value (`agents.fold.agent`)."""

    @property
    def member(self) -> str:
        """This worker's member id (follows a ``--web-port`` given to the worker)."""
        return self.settings.member(self.app.conf.web_port)

    @property
    def partitions(self) -> int:
        """The state topic's partition count."""
        return self.settings.partitions

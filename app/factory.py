"""The worker's composition root: builds the Faust app, its topics and tables,
the partition router, the agents, the role service, the web view and the CLI
commands, all sharing one `Context`.

This is the only module that wires those parts together (the context, the
agents and the tables import none of each other's wiring; see
tests/test_worker_layers.py). `app.main` builds the worker the CLI runs from
environment settings; tests build their own with a memory store and an
in-process transport.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import faust
from faust.types import TopicT
from faust.web.drivers.aiohttp import Web as AiohttpWeb

from agents import fold, service
from agents.events import EVENTS_TOPIC
from agents.roles import ROLES, RoleFunction
from app import access, commands, faust_config, faust_patches, health, web
from app.context import Context, TransportFactory
from app.faust_config import faust_options
from app.readiness import ClusterWatch, ReadinessBounds
from app.routing import FaustRouter
from app.settings import Settings
from coordination import Clock, SystemClock
from tables.faust_tables import declare

__all__ = ["CoordinationApp", "build", "kafka_transport_factory"]

log = logging.getLogger("app.factory")

TICKS_SUFFIX = "ticks"
EXIT_WATCHDOG_SECONDS = 5.0
BEFORE_STOP_SECONDS = 10.0
STOP_WATCHDOG_SECONDS = 10.0


class CoordinationWeb(AiohttpWeb):
    """Faust's aiohttp web server without its index page: ``/`` is the dashboard."""

    production_blueprints: ClassVar[list[Any]] = []
    debug_blueprints: ClassVar[list[Any]] = []


class CoordinationApp(faust.App):
    """A Faust app whose web server leaves ``/`` to the dashboard, whose local
    tables never outlive the process, and whose shutdown always ends.

    Tables: under exactly_once Faust writes table values to RocksDB at once
    but records the changelog offset only at commit. A worker stopped between
    the two (a crash, or a final commit that fails, which faust-streaming
    0.15.3 can do on shutdown) keeps values of a transaction the broker
    aborts; recovery reads only committed changelog records after the
    recorded offset, so those phantom values would stay and the record that
    caused them would be folded onto them again, its events lost. So every
    worker start removes the local tables and rebuilds them from the
    changelogs (one compacted record per role and per partition: cheap).

    Shutdown: the roles are resigned first (`before_stop` hooks), before
    Faust stops its consumer, which can hang for minutes when the broker is
    gone; a watchdog then bounds the rest of the stop (exit status 1 if it
    fires). And faust-streaming 0.15.3's consumer thread can outlive the
    event loop after a rebalance ("Event loop is closed") and keep the
    process alive: once the app has stopped, a second watchdog ends the
    process (exit status 0) if it has not exited within a few seconds.
    """

    before_stop: list[Callable[[], Awaitable[None]]]
    start_checks: list[Callable[[], Awaitable[None]]]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.before_stop = []
        self.start_checks = []

    def _new_web(self) -> Any:
        return CoordinationWeb(self)

    async def on_stop(self) -> None:
        for hook in self.before_stop:
            try:
                await asyncio.wait_for(hook(), BEFORE_STOP_SECONDS)
            except Exception as exc:
                log.warning("a shutdown step failed: %r", exc)
        _exit_if_stuck(STOP_WATCHDOG_SECONDS, status=1)
        await super().on_stop()

    def forget_local_tables(self) -> None:
        """Remove the RocksDB tables of a previous run: the changelogs are the truth."""
        tables = Path(self.conf.tabledir)
        if tables.exists():
            log.info("rebuilding the tables in %s from their changelogs", tables)
            shutil.rmtree(tables)

    async def on_first_start(self) -> None:
        # Runs once, when a worker starts the app (never for CLI commands).
        for start_check in self.start_checks:
            await start_check()
        self.forget_local_tables()
        await super().on_first_start()

    async def on_shutdown(self) -> None:
        await super().on_shutdown()
        _exit_if_stuck(EXIT_WATCHDOG_SECONDS, status=0)


def _exit_if_stuck(seconds: float, *, status: int) -> None:
    def watchdog() -> None:
        time.sleep(seconds)
        log.warning("the worker was still stopping %.0f s later (a Faust thread or a broker "
                    "that is gone); exiting with status %d", seconds, status)
        logging.shutdown()
        os._exit(status)

    threading.Thread(target=watchdog, name="exit watchdog", daemon=True).start()


def kafka_transport_factory(settings: Settings) -> TransportFactory:
    """Connect the coordination library to the cluster the app consumes from."""
    from coordination.kafka import KafkaTransport  # aiokafka clients only when running

    return lambda: KafkaTransport(settings.bootstrap_servers, topic=settings.state_topic,
                                  **settings.connection.client_options())


def create_app(settings: Settings, *, store: str = "rocksdb://",
               env: Mapping[str, str] | None = None) -> CoordinationApp:
    """The Faust app with this project's settings (see docs/app.md).

    Faust reads its own variables from `env` (default: the process
    environment); one that contradicts the worker's settings is refused
    (`app.faust_config.FaustConflictError`).
    """
    faust_patches.apply()
    env = os.environ if env is None else env
    options = faust_options(settings, store=store)
    faust_config.check(settings.app_id, options, env)
    return CoordinationApp(settings.app_id, **options, env=env)


def build(
    settings: Settings,
    *,
    store: str = "rocksdb://",
    transport_factory: TransportFactory | None = None,
    roles: Mapping[str, RoleFunction] | None = None,
    clock: Clock | None = None,
) -> Context:
    """One worker, ready for ``faust worker`` (or a test's ``test_context``).

    `roles` defaults to the live registry of ``@role`` declarations, so roles
    declared by modules imported after the build still run.
    """
    app = create_app(settings, store=store)
    tables = declare(app, settings.partitions)
    clock = clock or SystemClock()
    ctx = Context(
        settings=settings,
        app=app,
        tables=tables,
        # External topics (deploy/topics.py creates them): Faust must not.
        state_topic=_raw_topic(app, settings.state_topic, settings.partitions),
        events_topic=_raw_topic(app, settings.events_topic or EVENTS_TOPIC, settings.partitions),
        # Internal: Faust declares it, co-partitioned with the state topic.
        ticks_topic=_raw_topic(app, f"{settings.app_id}-{TICKS_SUFFIX}", settings.partitions,
                               internal=True, retention=3600.0),
        router=FaustRouter(app, tables.role_state),
        transport_factory=transport_factory or kafka_transport_factory(settings),
        roles=ROLES if roles is None else dict(roles),
        cluster=ClusterWatch(clock),
        readiness=ReadinessBounds(settings.ready_cluster_timeout, settings.ready_max_fold_lag,
                                  settings.ready_max_busy),
        clock=clock,
    )
    if transport_factory is None:  # the cluster's own ACLs; a test's transport has none
        access.install(ctx)
    fold.install(ctx)
    _subscribe_events(ctx)
    _probe_cluster(ctx)
    service.install(ctx)
    web.install(ctx)
    commands.install(ctx)
    return ctx


def _raw_topic(app: faust.App, name: str, partitions: int, *, internal: bool = False,
               retention: float | None = None) -> TopicT:
    """A topic of raw bytes keys and values (the codecs are ours)."""
    return app.topic(name, partitions=partitions, key_type=bytes, value_type=bytes,
                     key_serializer="raw", value_serializer="raw", internal=internal,
                     retention=retention)


def _probe_cluster(ctx: Context) -> None:
    """Ask the cluster for the state topic's end on a timer, for ``GET /ready``."""

    @ctx.app.timer(ctx.settings.ready_probe_interval, name="coordination-readiness-probe")
    async def probe_cluster() -> None:
        await health.probe(ctx)


def _subscribe_events(ctx: Context) -> None:
    """Subscribe to the events topic (the agent ignores what it reads).

    Under exactly_once Faust sends through the transactional producer of the
    destination partition's topic group, and a topic joins a group only if
    the app subscribes to it: this subscription is what puts the events
    topic in the state topic's group, so events commit with the fold.
    """

    @ctx.app.agent(ctx.events_topic, name="coordination-events-seen")
    async def seen(stream: Any) -> None:
        async for _ in stream:
            pass

"""``install(app, settings)``: the coordination on a Faust app its user built.

The one composition root of the worker: it adds to the app the two tables,
the topics, the fold, tick and events agents, the readiness probe, the role
service and the web views, all sharing one `Context`, and
returns the `Installation` the app's roles are declared on
(``@installation.role("name")``). `app.main`, the project's own worker, is
built through it too (docs/app.md#using-the-coordination-in-your-own-faust-app).

What it asks of the app, and refuses with a typed `InstallError` rather than
overriding: a `CoordinationApp` (the lifecycle the coordination needs), the
id ``settings.app_id``, the Faust options of `app.faust_config.required_options`
(the same cluster as the elections, exactly_once, and so on), and none of the
names and paths it adds already taken. The worker's changes to Faust come
with the app's class (`app.faust_changes`) and stay in that app. Everything
else is the app's own, except two aiokafka ERROR lines for conditions aiokafka
retries, which the whole process then logs as WARNING (`app.kafka_logs`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import faust
from faust.sensors import Monitor
from faust.types import TopicT

from agents import roles, service
from agents.context import TransportFactory
from agents.events import EVENTS_TOPIC
from agents.fold import agent as fold_agent
from app import access, health, kafka_logs
from app.context import Context
from app.faust_app import CoordinationApp
from app.faust_config import DERIVED, required_options
from app.readiness import ClusterWatch, ReadinessBounds
from app.settings import Settings
from app.web import views
from app.web.routing import FaustRouter
from krabka import RoleFunction
from krabka.clock import Clock, SystemClock
from krabka.kafka.connection import Connection
from tables import faust_tables

log = logging.getLogger(__name__)

__all__ = [
    "AlreadyInstalledError",
    "AppSettingError",
    "AppTypeError",
    "CoordinationApp",
    "InstallError",
    "Installation",
    "LateRoleError",
    "NameTakenError",
    "install",
    "kafka_transport_factory",
]

TICKS_SUFFIX = "ticks"
_INSTALLED = "_krabka_installation"


class InstallError(Exception):
    """The app cannot host the coordination as it is; the message says what to change."""


class AppTypeError(InstallError, TypeError):
    """The app is not a `CoordinationApp`."""


class AlreadyInstalledError(InstallError):
    """The coordination is installed on this app already."""


class AppSettingError(InstallError, ValueError):
    """The app's Faust settings contradict what the coordination needs."""


class NameTakenError(InstallError):
    """The app already has a table or web page under a name the coordination adds."""


class LateRoleError(InstallError):
    """A role declared once the worker already stands for its roles: it would never run."""


@dataclass(eq=False)
class Installation:
    """The coordination installed on one app: its context and its roles."""

    context: Context
    service: service.RoleService
    """The role service: started with the app's services, it stands for the roles."""
    _roles: dict[str, RoleFunction]
    _outputs: dict[str, tuple[str, ...]]

    @property
    def app(self) -> faust.App:
        return self.context.app

    @property
    def roles(self) -> Mapping[str, RoleFunction]:
        """The roles declared on this installation, by name."""
        return self.context.roles

    @property
    def outputs(self) -> Mapping[str, tuple[str, ...]]:
        """Each declared role's output topics (``role(..., outputs=...)``)."""
        return self.context.outputs

    def role(self, name: str, *, outputs: Iterable[str] = ()
             ) -> Callable[[RoleFunction], RoleFunction]:
        """Declare `name` a role the worker group elects a leader for::

            @installation.role("acme.billing-scheduler", outputs=["invoices"])
            async def schedule(leadership: Leadership) -> None: ...

        The function runs on one worker at a time, only while it leads, and is
        cancelled on a fence or at the fence deadline. `outputs` are the
        topics it writes through ``leadership.transaction()``: in term mode
        (``COORDINATION_FENCING=term``) the only ones it may write, each
        barriered with the term before the tenure's first record; in epoch
        mode the topics whose Write ACL the start-up check asks for (the
        broker fences every topic there). Declare roles before the worker
        starts (at import, as agents are): once it stands for its roles a new
        one is refused (`LateRoleError`).
        """
        if self.service.started:
            raise LateRoleError(f"role {name!r} is declared after the worker started standing "
                                f"for {sorted(self._roles)}; declare it before the app starts")
        declared = roles.check_outputs(name, outputs)
        self.context.settings.role_options(declared)  # a bad topic name fails here
        decorate = roles.declare(self._roles, name)

        def declare(fn: RoleFunction) -> RoleFunction:
            decorate(fn)
            self._outputs[name] = declared
            return fn

        return declare


def kafka_transport_factory(settings: Settings) -> TransportFactory:
    """Connect the coordination library to the cluster the app consumes from."""
    from krabka.kafka import KafkaTransport, register_error_codes  # only when running

    # Faust's transactional producers meet PRODUCER_FENCED (90) before the
    # role service creates its first transport: aiokafka must know the code.
    register_error_codes()
    return lambda: KafkaTransport(settings.bootstrap_servers, topic=settings.state_topic,
                                  terms_topic=settings.terms_topic,
                                  **settings.connection.client_options())


def install(
    app: faust.App,
    settings: Settings,
    *,
    transport_factory: TransportFactory | None = None,
    clock: Clock | None = None,
) -> Installation:
    """Add the coordination to `app` (see the module's text for what it requires).

    `transport_factory` and `clock` default to the Kafka transport on
    ``settings.bootstrap_servers`` and the system clock; tests pass their own.
    """
    _check(app, settings)
    _check_free(app)
    kafka_logs.install()
    tables = faust_tables.declare(app, settings.partitions)
    clock = clock or SystemClock()
    declared: dict[str, RoleFunction] = {}
    outputs: dict[str, tuple[str, ...]] = {}
    ctx = Context(
        settings=settings,
        app=app,
        tables=tables,
        # External topics (deploy/topics.py creates them): Faust must not.
        state_topic=_raw_topic(app, settings.state_topic, settings.partitions),
        events_topic=_raw_topic(app, settings.events_topic or EVENTS_TOPIC, settings.partitions),
        terms_topic=(_raw_topic(app, settings.terms_topic, settings.partitions)
                     if settings.term_mode else None),
        # Internal: Faust declares it, co-partitioned with the state topic.
        ticks_topic=_raw_topic(app, f"{settings.app_id}-{TICKS_SUFFIX}", settings.partitions,
                               internal=True, retention=3600.0),
        router=FaustRouter(app, tables.role_state),
        transport_factory=transport_factory or kafka_transport_factory(settings),
        roles=declared,
        outputs=outputs,
        cluster=ClusterWatch(clock),
        readiness=ReadinessBounds(settings.ready_cluster_timeout, settings.ready_max_fold_lag,
                                  settings.ready_max_busy),
        clock=clock,
    )
    if transport_factory is None:  # the cluster's own ACLs; a test's transport has none
        access.install(ctx)
    _export_metrics(ctx)
    fold_agent.install(ctx)
    if not settings.term_mode:
        _subscribe_events(ctx)
    _probe_cluster(ctx)
    role_service = service.install(ctx)
    views.install(ctx)
    installation = Installation(ctx, role_service, declared, outputs)
    setattr(app, _INSTALLED, installation)
    return installation


def _check(app: faust.App, settings: Settings) -> None:
    """Refuse an app that cannot host the coordination, saying what to change."""
    if not isinstance(app, CoordinationApp):
        raise AppTypeError(
            f"install() needs a CoordinationApp, got {type(app).__module__}."
            f"{type(app).__qualname__}: build the app with app.install.CoordinationApp(...) "
            "(a faust.App subclass), or derive your app class from it")
    if getattr(app, _INSTALLED, None) is not None:
        raise AlreadyInstalledError(f"the coordination is already installed on app {app.conf.id!r}")
    if app.conf.id != settings.app_id:
        raise AppSettingError(
            f"the app's id is {app.conf.id!r} but settings.app_id (COORDINATION_APP_ID) is "
            f"{settings.app_id!r}: they name one consumer group and its ticks topic; "
            "make them equal")
    required = required_options(settings)
    expected = faust.Settings(settings.app_id, **required, env={})
    wrong = [
        f"- {option} is {_shown(getattr(app.conf, option))}, needs "
        f"{_shown(getattr(expected, option))}{_why(option, settings)}"
        for option in [*required, *DERIVED]
        if getattr(app.conf, option) != getattr(expected, option)
    ]
    credentials = _credentials_mismatch(app.conf.broker_credentials, settings.connection)
    if credentials:
        wrong.append(f"- broker_credentials {credentials}; pass broker_credentials="
                     "app.faust_config.broker_credentials(settings.connection)")
    if wrong:
        raise AppSettingError(
            f"app {app.conf.id!r} contradicts what the coordination needs "
            "(docs/app.md#using-the-coordination-in-your-own-faust-app):\n" + "\n".join(wrong))


def _why(option: str, settings: Settings) -> str:
    """What a required option follows from, where it follows a setting."""
    if option == "processing_guarantee":
        return (f" under COORDINATION_FENCING={settings.fencing} (pass "
                "processing_guarantee=app.faust_config.processing_guarantee(settings))")
    return ""


def _credentials_mismatch(credentials: Any, connection: Connection) -> str | None:
    """How the app's ``broker_credentials`` would reach the cluster otherwise
    than the coordination's transport, or None if they agree.

    The TLS contexts and passwords themselves cannot be compared; the
    protocol, the SASL mechanism and the user can, and they are what a
    copy-and-paste mistake gets wrong.
    """
    protocol = connection.security_protocol
    if credentials is None:
        return None if protocol == "PLAINTEXT" else f"are unset, but the connection is {protocol}"
    if isinstance(credentials, faust.SASLCredentials):
        theirs = (credentials.protocol.value, credentials.mechanism.value, credentials.username)
        ours = (protocol, connection.sasl_mechanism, connection.sasl_username)
        if theirs != ours:
            return (f"are {'/'.join(map(str, theirs))}, but the connection is "
                    f"{'/'.join(map(str, ours))}")
        return None
    if isinstance(credentials, faust.SSLCredentials):
        return None if protocol == "SSL" else f"are SSL, but the connection is {protocol}"
    return f"are a {type(credentials).__name__}, which the coordination cannot compare"


def _check_free(app: faust.App) -> None:
    """Refuse an app that already has a table or page the coordination adds
    (aiohttp would serve only one of two pages on a path)."""
    taken = [f"table {name!r}" for name in (faust_tables.ROLE_STATE, faust_tables.PARTITION_STATE)
             if name in app.tables]
    taken += [f"web page {path!r}" for path, _ in views.ROUTES if path in app.web.views]
    if taken:
        raise NameTakenError(f"app {app.conf.id!r} already has " + ", ".join(taken)
                             + ": the coordination adds them; rename yours")


def _shown(value: Any) -> str:
    if isinstance(value, list):  # Faust keeps broker URLs in a list
        return ";".join(str(v) for v in value)
    return repr(getattr(value, "value", value))


def _raw_topic(app: faust.App, name: str, partitions: int, *, internal: bool = False,
               retention: float | None = None) -> TopicT:
    """A topic of raw bytes keys and values (the codecs are ours)."""
    return app.topic(name, partitions=partitions, key_type=bytes, value_type=bytes,
                     key_serializer="raw", value_serializer="raw", internal=internal,
                     retention=retention)


def _export_metrics(ctx: Context) -> None:
    """Faust's sensor figures, the fold lag and readiness on the worker's registry
    (docs/app.md#metrics).

    An app that set a monitor of its own keeps it: its figures are then the
    app's affair, and only the coordination's reach ``GET /metrics``.
    """
    if type(ctx.app.monitor) is Monitor:
        ctx.app.monitor = ctx.metrics.faust_monitor()
    else:
        log.info("app %r has its own Faust monitor (%s): Faust's figures are not exported "
                 "at /metrics", ctx.app.conf.id, type(ctx.app.monitor).__qualname__)
    ctx.metrics.follow_fold_lag(lambda: health.fold_lag(ctx))
    ctx.metrics.follow_readiness(lambda: health.verdict(ctx).ready)


def _probe_cluster(ctx: Context) -> None:
    """Ask the cluster for the state topic's end, for ``GET /ready``: once the
    worker has started, then every probe interval (`app.health.keep_probing`)."""

    @ctx.app.task
    async def probe_cluster() -> None:
        await health.keep_probing(ctx)


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

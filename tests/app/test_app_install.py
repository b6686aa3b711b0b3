"""``install(app, settings)`` on an app its user built: what it adds, what it
refuses (with a typed error, leaving the app as it was), and roles declared
per installation."""

from __future__ import annotations

import asyncio
import re
import ssl

import faust
import pytest
from faust.sensors import Monitor
from faust.sensors.prometheus import PrometheusMonitor

from app.faust_app import WebDisabledError
from app.faust_config import broker_credentials
from app.install import (
    AlreadyInstalledError,
    AppSettingError,
    AppTypeError,
    CoordinationApp,
    InstallError,
    LateRoleError,
    NameTakenError,
    install,
)
from app.settings import Settings
from krabka.kafka import Connection
from krabka.testing import MemoryBroker, MemoryTransport
from tests.support.polling import eventually

SETTINGS = Settings(connection=Connection("k1:9092"), app_id="user-app", partitions=4,
                    state_topic="user-state", events_topic="user-events", member_id="m")
GOOD = {"broker": "kafka://k1:9092", "processing_guarantee": "exactly_once",
        "store": "memory://"}


def user_app(app_id: str = "user-app", env: dict[str, str] | None = None,
             **options: object) -> CoordinationApp:
    """An app as its user builds it: their own id and options, no worker settings."""
    return CoordinationApp(app_id, **{**GOOD, **options}, env=env or {})


def memory_install(app: faust.App, settings: Settings = SETTINGS):
    broker = MemoryBroker()
    return install(app, settings, transport_factory=lambda: MemoryTransport(broker))


def test_install_adds_the_tables_topics_agents_and_views_beside_the_app_s_own():
    app = user_app()

    @app.agent(app.topic("orders"), name="user-orders")
    async def orders(stream):
        async for _ in stream:
            pass

    installation = memory_install(app)
    ctx = installation.context
    assert ctx.app is app
    assert installation.app is app
    assert set(app.tables) == {"role_state", "partition_state"}
    assert ctx.state_topic.get_topic_name() == "user-state"
    assert ctx.events_topic.get_topic_name() == "user-events"
    assert ctx.ticks_topic.get_topic_name() == "user-app-ticks"
    assert set(app.agents) >= {"user-orders", "coordination-fold", "coordination-ticks",
                               "coordination-events-seen"}
    assert set(app.web.views) == {"/", "/health", "/ready", "/metrics", "/roles/",
                                  "/roles/{role}/", "/roles/{role}/authoritative",
                                  "/events/", "/rebalance/"}
    assert installation.roles == {}


def test_the_installed_app_runs_on_the_worker_s_faust_classes_and_another_app_does_not():
    app = user_app()
    memory_install(app)
    other = faust.App("other-app", **GOOD)
    assert type(app.transport) is app.worker_classes.transport
    assert type(app.tables) is app.worker_classes.table_manager
    assert type(other.transport) is not app.worker_classes.transport
    assert type(other.tables) is faust.App("third-app", **GOOD).tables.__class__


def test_a_plain_faust_app_is_refused_with_what_to_build_instead():
    app = faust.App("user-app", **GOOD)
    with pytest.raises(AppTypeError, match="CoordinationApp") as refused:
        memory_install(app)
    assert isinstance(refused.value, TypeError)
    assert isinstance(refused.value, InstallError)
    assert len(app.tables) == 0


def test_installing_twice_on_one_app_is_refused():
    app = user_app()
    memory_install(app)
    with pytest.raises(AlreadyInstalledError, match="already installed"):
        memory_install(app)


def test_an_app_id_other_than_the_settings_is_refused_naming_both():
    with pytest.raises(AppSettingError, match=r"'other-app'.*COORDINATION_APP_ID.*'user-app'"):
        memory_install(user_app("other-app"))


@pytest.mark.parametrize(("option", "value", "shown"), [
    ("broker", "kafka://elsewhere:9092", "kafka://elsewhere:9092"),
    ("broker_consumer", "kafka://elsewhere:9092", "kafka://elsewhere:9092"),
    ("broker_producer", "kafka://elsewhere:9092", "kafka://elsewhere:9092"),
    ("processing_guarantee", "at_least_once", "'at_least_once'"),
    ("consumer_auto_offset_reset", "latest", "'latest'"),
    ("topic_allow_declare", False, "False"),
])
def test_an_app_setting_that_contradicts_the_coordination_is_refused_naming_it(
        option, value, shown):
    app = user_app(**{option: value})
    with pytest.raises(AppSettingError) as refused:
        memory_install(app)
    assert f"- {option} is {shown}, needs " in str(refused.value)
    assert isinstance(refused.value, ValueError)
    assert len(app.tables) == 0  # refused before anything was added


async def test_a_worker_started_without_its_web_server_is_refused(tmp_path):
    app = user_app(web_enabled=False, datadir=str(tmp_path))
    memory_install(app)
    with pytest.raises(WebDisabledError, match="without-web"):
        await app.on_first_start()


def test_processing_guarantee_left_at_faust_s_default_is_refused():
    app = CoordinationApp("user-app", broker="kafka://k1:9092", store="memory://", env={})
    with pytest.raises(AppSettingError, match="processing_guarantee is 'at_least_once', "
                                              "needs 'exactly_once'"):
        memory_install(app)


def test_a_faust_variable_that_moves_the_app_to_another_cluster_is_refused():
    app = user_app(env={"BROKER_URL": "kafka://elsewhere:9092"})
    with pytest.raises(AppSettingError, match="broker is kafka://elsewhere:9092, "
                                              "needs kafka://k1:9092"):
        memory_install(app)


def test_what_the_coordination_leaves_to_the_app_is_the_app_s_own():
    app = user_app(topic_partitions=12, web_port=7123, broker_commit_interval=5.0)
    ctx = memory_install(app).context
    assert (app.conf.topic_partitions, app.conf.web_port) == (12, 7123)
    assert app.conf.broker_commit_interval == 5.0
    assert ctx.member == "m"
    assert ctx.partitions == 4  # the state topic's, not the app's default


def test_a_table_the_coordination_adds_already_declared_is_refused():
    app = user_app()
    app.Table("role_state")
    with pytest.raises(NameTakenError, match="table 'role_state'"):
        memory_install(app)
    assert set(app.tables) == {"role_state"}


def test_a_page_the_coordination_serves_already_declared_is_refused():
    app = user_app()

    @app.page("/health")
    async def mine(web, request):
        return web.json({"mine": True})

    with pytest.raises(NameTakenError, match="web page '/health'"):
        memory_install(app)


def test_roles_belong_to_their_installation():
    first, second = memory_install(user_app()), memory_install(user_app())

    @first.role("billing")
    async def billing(leadership):
        pass

    assert first.roles == {"billing": billing}
    assert second.roles == {}
    assert first.context.roles is first.roles  # what the role service stands for


async def test_a_role_declared_once_the_worker_stands_for_its_roles_is_refused():
    installation = memory_install(user_app())
    await installation.service.start()
    try:
        with pytest.raises(LateRoleError, match=r"'late'.*before the app starts"):
            installation.role("late")
    finally:
        await installation.service.stop()
    assert "late" not in installation.roles


def test_faust_s_figures_are_exported_unless_the_app_brought_its_own_monitor():
    plain = user_app()
    memory_install(plain)
    assert isinstance(plain.monitor, PrometheusMonitor)

    class OwnMonitor(Monitor):
        pass

    own = user_app(monitor=OwnMonitor())
    memory_install(own)
    assert type(own.monitor) is OwnMonitor


SECURED = Settings(connection=Connection("k1:9093", security_protocol="SASL_SSL",
                                         sasl_mechanism="SCRAM-SHA-512", sasl_username="worker",
                                         sasl_password="secret"),
                   app_id="user-app", partitions=4, member_id="m")


def test_an_app_that_reaches_a_secured_cluster_as_the_settings_say_is_installed():
    app = user_app(broker="kafka://k1:9093",
                   broker_credentials=broker_credentials(SECURED.connection))
    memory_install(app, SECURED)


@pytest.mark.parametrize(("credentials", "named"), [
    (None, "broker_credentials are unset, but the connection is SASL_SSL"),
    (faust.SASLCredentials(username="other", password="x", mechanism="SCRAM-SHA-512",
                           ssl_context=ssl.create_default_context()),
     "broker_credentials are SASL_SSL/SCRAM-SHA-512/other, but the connection is "
     "SASL_SSL/SCRAM-SHA-512/worker"),
    (faust.SSLCredentials(ssl.create_default_context()),
     "broker_credentials are SSL, but the connection is SASL_SSL"),
])
def test_an_app_that_would_reach_the_cluster_otherwise_than_the_settings_is_refused(
        credentials, named):
    app = user_app(broker="kafka://k1:9093", broker_credentials=credentials)
    with pytest.raises(AppSettingError, match=re.escape(named)):
        memory_install(app, SECURED)


def test_credentials_on_an_app_whose_settings_are_plaintext_are_refused():
    app = user_app(broker_credentials=faust.SSLCredentials(ssl.create_default_context()))
    with pytest.raises(AppSettingError, match="are SSL, but the connection is PLAINTEXT"):
        memory_install(app)


TERM = Settings(connection=Connection("k1:9092"), app_id="user-app", partitions=4,
                state_topic="user-state", terms_topic="user-terms", events_topic="user-events",
                member_id="m", fencing="term")


def test_a_term_mode_worker_on_an_exactly_once_app_is_refused_naming_the_fencing():
    # exactly_once is Faust's transactional producers: term mode has none.
    app = user_app()
    with pytest.raises(AppSettingError, match=re.escape(
            "processing_guarantee is 'exactly_once', needs 'at_least_once' under "
            "COORDINATION_FENCING=term")):
        memory_install(app, TERM)
    assert len(app.tables) == 0


def test_a_term_mode_worker_folds_the_terms_topic_and_keeps_no_transaction_group():
    app = user_app(processing_guarantee="at_least_once")
    ctx = memory_install(app, TERM).context
    assert ctx.terms_topic is not None
    assert ctx.terms_topic.get_topic_name() == "user-terms"
    agents = {agent.name for agent in app.agents.values()}
    assert "coordination-fold-terms" in agents
    # The events subscription exists only to put the events topic in the
    # state topic's transaction group.
    assert "coordination-events-seen" not in agents
    epoch = user_app()
    epoch_ctx = memory_install(epoch).context
    assert epoch_ctx.terms_topic is None
    assert "coordination-events-seen" in {agent.name for agent in epoch.agents.values()}
    assert "coordination-fold-terms" not in {agent.name for agent in epoch.agents.values()}


def test_a_role_declares_its_outputs_on_the_installation():
    installation = memory_install(user_app())

    @installation.role("billing", outputs=["invoices", "audit"])
    async def billing(leadership):
        pass

    @installation.role("quiet")
    async def quiet(leadership):
        pass

    assert installation.outputs == {"billing": ("invoices", "audit"), "quiet": ()}


@pytest.mark.parametrize(("outputs", "message"), [
    ("invoices", "takes a list of topic names, not the single str 'invoices'"),
    (["invoices", ""], "an output topic must be a non-empty string, got ''"),
    (["invoices", "invoices"], "output topic\\(s\\) invoices declared twice"),
])
def test_bad_outputs_are_refused_when_the_role_is_declared(outputs, message):
    installation = memory_install(user_app())
    with pytest.raises(ValueError, match=message):
        installation.role("billing", outputs=outputs)
    assert "billing" not in installation.roles


async def test_every_runner_of_a_term_mode_worker_runs_term_mode_with_its_role_s_outputs(
        monkeypatch):
    from agents import service

    monkeypatch.setattr(service, "ASSIGNMENT_WAIT", 0)  # no Faust group here
    installation = memory_install(user_app(processing_guarantee="at_least_once"), TERM)

    @installation.role("billing", outputs=["invoices"])
    async def billing(leadership):
        await asyncio.Event().wait()

    @installation.role("quiet")
    async def quiet(leadership):
        await asyncio.Event().wait()

    await installation.service.start()
    try:
        runners = installation.context.runners
        async def standing() -> set[str]:
            return set(runners)

        await eventually(standing, lambda names: names == {"billing", "quiet"}, 5.0)
        assert runners["billing"].options.fencing == "term"
        assert runners["billing"].options.outputs == ("invoices",)
        assert runners["quiet"].options.outputs == ()
    finally:
        await installation.service.stop()


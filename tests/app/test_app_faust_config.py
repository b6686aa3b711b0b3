"""One configuration: a Faust environment variable that contradicts the
worker's settings stops the worker, naming both; Faust variables for what the
worker leaves to Faust are accepted; ``python -m app.check`` prints the
effective configuration with secrets masked."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import faust
import pytest
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

from app.check import report
from app.factory import create_app
from app.faust_config import (
    TRANSACTIONAL_BATCH_BYTES,
    TRANSACTIONAL_LINGER,
    FaustConflictError,
    conflicts,
    faust_options,
)
from app.settings import VARIABLES, Settings, mask
from krabka.kafka.connection import VARIABLES as CONNECTION_VARIABLES
from krabka.kafka.connection import Connection

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = Settings(connection=Connection("k1:9092"), web_port=7001, web_host="w1")


def conflict_texts(env):
    return [str(c) for c in conflicts(SETTINGS.app_id, faust_options(SETTINGS), env)]


def test_broker_url_elsewhere_is_refused_naming_both_variables():
    with pytest.raises(FaustConflictError) as refused:
        create_app(SETTINGS, store="memory://", env={"BROKER_URL": "kafka://other:9092"})
    text = str(refused.value)
    assert "BROKER_URL='kafka://other:9092'" in text
    assert "KAFKA_BOOTSTRAP_SERVERS" in text
    assert "'kafka://k1:9092'" in text


def test_every_contradicting_variable_is_listed_with_the_worker_s_own():
    texts = conflict_texts({"WEB_PORT": "7002", "PROCESSING_GUARANTEE": "at_least_once",
                            "BROKER_CONSUMER_URL": "kafka://other:1",
                            "BROKER_SESSION_TIMEOUT": "60"})
    assert len(texts) == 4
    joined = "\n".join(texts)
    assert "WEB_PORT='7002' makes Faust's web_port 7002, but COORDINATION_WEB_PORT" in joined
    assert "PROCESSING_GUARANTEE" in joined
    assert "the worker fixes it at 'exactly_once'" in joined
    assert "BROKER_CONSUMER_URL" in joined  # Faust's consumer would follow it, not the broker
    assert "COORDINATION_SESSION_TIMEOUT" in joined


def test_a_faust_variable_that_agrees_or_tunes_what_the_worker_leaves_to_faust_is_accepted():
    env = {"BROKER_URL": "kafka://k1:9092", "WEB_PORT": "7001",
           "STREAM_BUFFER_MAXSIZE": "100", "PRODUCER_COMPRESSION_TYPE": "gzip"}
    assert conflict_texts(env) == []
    app = create_app(SETTINGS, store="memory://", env=env)
    assert app.conf.stream_buffer_maxsize == 100  # Faust still reads what it may


async def test_under_exactly_once_the_producers_hold_a_partition_s_writes_for_a_batch():
    """A transaction's writes are read only once it commits, and the commit sends
    every batch still open: a producer sending each write at once (Faust's linger
    of 0) sent a request per partition for every few records folded."""
    app = create_app(SETTINGS, store="memory://", env={})
    assert app.conf.processing_guarantee.value == "exactly_once"
    producer = app.producer
    assert producer.linger_ms == int(TRANSACTIONAL_LINGER * 1000) > 0
    assert producer.max_batch_size == TRANSACTIONAL_BATCH_BYTES
    assert producer._new_producer(transactional_id="t")._message_accumulator._linger_time \
        == TRANSACTIONAL_LINGER


def test_in_term_mode_each_event_is_sent_at_once():
    """At least once, the fold waits for each event before it writes the value: a
    linger would hold every record back."""
    app = create_app(Settings(connection=Connection("k1:9092"), fencing="term"),
                     store="memory://", env={})
    assert app.conf.processing_guarantee.value == "at_least_once"
    assert app.producer.linger_ms == 0


def test_a_producer_linger_of_faust_s_own_contradicts_the_worker_s_under_exactly_once():
    texts = conflict_texts({"PRODUCER_LINGER": "0"})
    assert len(texts) == 1
    assert "the worker fixes it at 0.05" in texts[0]


def test_faust_s_env_prefix_is_followed():
    texts = conflict_texts({"APP_ENV_PREFIX": "MY_", "MY_WEB_PORT": "7002",
                            "WEB_PORT": "9999"})
    assert len(texts) == 1
    assert texts[0].startswith("MY_WEB_PORT='7002'")


def test_every_option_the_worker_sets_is_a_faust_setting():
    # A misspelt option would be ignored by Faust, and never checked here.
    assert set(faust_options(SETTINGS)) - {"autodiscover"} <= set(faust.Settings.SETTINGS)


def test_every_setting_has_its_variable_and_docs_list_it():
    names = {item.name for item in fields(Settings)} - {"connection"}
    assert set(VARIABLES) == names
    docs = (ROOT / "docs" / "app.md").read_text()
    every = [*VARIABLES.values(), *CONNECTION_VARIABLES.values()]
    assert [v for v in every if f"`{v}`" not in docs] == []


def test_secrets_and_url_passwords_are_masked():
    assert mask("KAFKA_SASL_PASSWORD", "hunter2") == "********"
    assert mask("broker_credentials", "x") == "********"
    assert mask("BROKER_URL", "kafka://u:hunter2@h:9092") == "kafka://u:********@h:9092"
    assert mask("KAFKA_BOOTSTRAP_SERVERS", "a:1,b:2") == "a:1,b:2"


def test_the_check_prints_the_configuration_and_exits_1_on_a_conflict():
    text, status = report({"COORDINATION_WEB_PORT": "7005", "STREAM_BUFFER_MAXSIZE": "9",
                           "BROKER_URL": "kafka://u:hunter2@other:9092"})
    assert status == 1
    assert "COORDINATION_WEB_PORT = 7005  (environment)" in text
    assert "COORDINATION_PARTITIONS = 16  (default)" in text
    assert "web_port = 7005  (COORDINATION_WEB_PORT)" in text
    assert "STREAM_BUFFER_MAXSIZE = 9  (Faust's stream_buffer_maxsize)" in text
    assert "hunter2" not in text
    assert "refuses to start" in text


def test_the_check_command_exits_0_when_consistent_and_2_on_a_bad_setting():
    def run(**env):
        return subprocess.run([sys.executable, "-m", "app.check"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60, check=False)

    fine = run(PATH="/usr/bin:/bin")
    assert fine.returncode == 0, fine.stderr
    assert "No Faust variable contradicts the worker's settings." in fine.stdout
    bad = run(PATH="/usr/bin:/bin", COORDINATION_PARTITIONS="many")
    assert bad.returncode == 2
    assert "COORDINATION_PARTITIONS='many' is not an integer" in bad.stdout


def test_json_logs_are_one_object_per_line_through_faust_s_logging_setup():
    # What ``faust worker -l info`` does with the app's logging_config, in a
    # process of its own (it replaces the root logger's handlers).
    code = (
        "import logging, mode.utils.logging as m\n"
        "from app.faust_config import faust_options\n"
        "from app.settings import Settings\n"
        "options = faust_options(Settings.from_env({'COORDINATION_LOG_FORMAT': 'json'}))\n"
        "m.setup_logging(loglevel='info', logging_config=dict(options['logging_config']))\n"
        "logging.getLogger('agents.fold.agent').warning('skipped %d', 3)\n"
        "logging.getLogger('agents.fold.agent').debug('not at info')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=True)
    lines = done.stdout.splitlines() + done.stderr.splitlines()
    records = [json.loads(line) for line in lines if line.startswith("{")]
    assert len(records) == 1, lines
    assert records[0]["message"] == "skipped 3"
    assert (records[0]["level"], records[0]["logger"]) == ("WARNING", "agents.fold.agent")
    assert "time" in records[0]


def test_text_logs_leave_faust_s_logging_alone_and_other_formats_are_refused():
    assert "logging_config" not in faust_options(Settings.from_env({}))
    with pytest.raises(ValueError, match="COORDINATION_LOG_FORMAT='xml' is not one of text"):
        Settings.from_env({"COORDINATION_LOG_FORMAT": "xml"})


def _secured(**extra):
    # No KAFKA_SSL_CAFILE: the system's CAs.
    return {"KAFKA_BOOTSTRAP_SERVERS": "k1:9093", **extra}


def test_faust_gets_the_connection_s_sasl_ssl_settings_as_broker_credentials(tmp_path):
    secret = tmp_path / "password"
    secret.write_text("hunter2\n")
    settings = Settings.from_env(_secured(
        KAFKA_SECURITY_PROTOCOL="SASL_SSL", KAFKA_SASL_MECHANISM="SCRAM-SHA-512",
        KAFKA_SASL_USERNAME="worker", KAFKA_SASL_PASSWORD_FILE=str(secret)))
    credentials = faust_options(settings)["broker_credentials"]
    assert isinstance(credentials, faust.SASLCredentials)
    # What Faust hands aiokafka: the options the coordination transport gets too.
    auth = credentials_to_aiokafka_auth(credentials)
    theirs = {k: v for k, v in auth.items() if k != "ssl_context"}
    ours = settings.connection.client_options()
    assert theirs == {k: v for k, v in ours.items() if k != "ssl_context"}
    assert theirs["security_protocol"] == "SASL_SSL"
    assert theirs["sasl_plain_password"] == "hunter2"
    assert auth["ssl_context"].verify_mode == ours["ssl_context"].verify_mode


def test_tls_without_sasl_is_faust_s_ssl_credentials_and_plaintext_none(tmp_path):
    tls = Settings.from_env(_secured(KAFKA_SECURITY_PROTOCOL="SSL"))
    auth = credentials_to_aiokafka_auth(faust_options(tls)["broker_credentials"])
    assert auth["security_protocol"] == "SSL"
    assert "broker_credentials" not in faust_options(Settings.from_env({}))


def test_the_check_prints_the_connection_with_the_password_masked(tmp_path):
    text, status = report(_secured(
        KAFKA_SECURITY_PROTOCOL="SASL_SSL", KAFKA_SASL_MECHANISM="PLAIN",
        KAFKA_SASL_USERNAME="worker", KAFKA_SASL_PASSWORD="hunter2"))
    assert status == 0, text
    assert "KAFKA_SASL_USERNAME = worker  (environment)" in text
    assert "KAFKA_SASL_PASSWORD = ********  (environment)" in text
    assert "broker_credentials = ********" in text
    assert "hunter2" not in text


def test_the_check_exits_2_naming_a_connection_setting_that_cannot_work():
    text, status = report({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL"})
    assert status == 2
    assert "KAFKA_SASL_MECHANISM" in text

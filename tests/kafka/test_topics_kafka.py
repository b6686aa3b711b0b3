"""`ensure_topics` and ``krabka create-topics`` on the real broker.

Each test names its own topics, so the topics the broker already has are
none of its business. What they create is held to the library's own
start-up checks (`check_topic`, `check_terms_topic`): that is what a member
runs before it campaigns.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from krabka import StateTopicError
from krabka.kafka import AccessDeniedError, Connection, KafkaTransport, ensure_topics
from tests.support.processes import ROOT
from tests.support.secure_cluster import SecureCluster

pytestmark = pytest.mark.integration

PARTITIONS = 3
LEASE = 10.0


def names() -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:8]
    return f"state-{suffix}", f"terms-{suffix}"


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "krabka", "create-topics", *args],
                          capture_output=True, text=True, timeout=90, cwd=ROOT, check=False,
                          env={**os.environ, **(env or {})})


async def create_raw(bootstrap: str, topic: str, partitions: int, configs: dict[str, str]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=configs)])
    finally:
        await admin.close()


async def topic_config(bootstrap: str, topic: str) -> dict[str, str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (response,) = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic)])
        (resource,) = response.to_object()["resources"]
        return {entry["config_names"]: entry["config_value"]
                for entry in resource["config_entries"]}
    finally:
        await admin.close()


async def test_ensure_topics_creates_a_state_topic_the_start_up_check_accepts(kafka_bootstrap):
    state, _ = names()
    done = await ensure_topics(Connection(kafka_bootstrap), topic=state, partitions=PARTITIONS)
    assert done == {state: "created"}
    async with KafkaTransport(kafka_bootstrap, topic=state) as transport:
        await transport.check_topic(PARTITIONS, LEASE)
    configs = await topic_config(kafka_bootstrap, state)
    assert configs["cleanup.policy"] == "compact"
    assert configs["segment.ms"] == "60000"


async def test_term_fencing_also_creates_the_terms_topic_term_mode_accepts(kafka_bootstrap):
    state, terms = names()
    done = await ensure_topics(Connection(kafka_bootstrap), fencing="term", topic=state,
                               terms_topic=terms, partitions=PARTITIONS)
    assert done == {state: "created", terms: "created"}
    async with KafkaTransport(kafka_bootstrap, topic=state, terms_topic=terms) as transport:
        await transport.check_topic(PARTITIONS, LEASE)
        await transport.check_terms_topic(PARTITIONS)
    assert (await topic_config(kafka_bootstrap, terms))["delete.retention.ms"] == "600000"


async def test_a_second_call_finds_the_topics_and_succeeds(kafka_bootstrap):
    state, terms = names()
    async with KafkaTransport(kafka_bootstrap, topic=state, terms_topic=terms) as transport:
        first = await ensure_topics(transport, fencing="term", partitions=PARTITIONS)
        again = await ensure_topics(transport, fencing="term", partitions=PARTITIONS)
        await transport.check_terms_topic(PARTITIONS)
    assert first == {state: "created", terms: "created"}
    assert again == {state: "exists", terms: "exists"}


async def test_an_existing_topic_that_is_not_compacted_is_refused_as_the_start_up_check_would(
        kafka_bootstrap):
    state, _ = names()
    await create_raw(kafka_bootstrap, state, PARTITIONS, {"cleanup.policy": "delete"})
    with pytest.raises(StateTopicError, match=r"cleanup\.policy='delete'; it must be exactly "
                                              "'compact'"):
        await ensure_topics(Connection(kafka_bootstrap), topic=state, partitions=PARTITIONS)
    # Checked, never changed.
    assert (await topic_config(kafka_bootstrap, state))["cleanup.policy"] == "delete"


async def test_an_existing_topic_with_another_partition_count_is_refused(kafka_bootstrap):
    state, terms = names()
    await ensure_topics(Connection(kafka_bootstrap), topic=state, partitions=PARTITIONS)
    await create_raw(kafka_bootstrap, terms, PARTITIONS + 1, {"cleanup.policy": "compact"})
    with pytest.raises(StateTopicError,
                       match=rf"the terms topic '{terms}' has {PARTITIONS + 1} partitions"):
        await ensure_topics(Connection(kafka_bootstrap), fencing="term", topic=state,
                            terms_topic=terms, partitions=PARTITIONS)


async def test_a_replication_factor_the_cluster_cannot_give_is_refused_naming_it(
        kafka_bootstrap):
    state, _ = names()
    with pytest.raises(StateTopicError, match="replication factor 5: "
                                              "InvalidReplicationFactorError"):
        await ensure_topics(Connection(kafka_bootstrap), topic=state, partitions=PARTITIONS,
                            replication_factor=5)


def test_create_topics_creates_then_finds_the_topics_and_prints_what_it_did(kafka_bootstrap):
    state, terms = names()
    flags = ["--bootstrap-servers", kafka_bootstrap, "--topic", state, "--terms-topic", terms,
             "--partitions", str(PARTITIONS), "--fencing", "term"]
    first = cli(*flags)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout) == {"topics": [{"topic": state, "outcome": "created"},
                                                   {"topic": terms, "outcome": "created"}]}
    again = cli(*flags, "--output", "table")
    assert again.returncode == 0, again.stderr
    assert again.stdout.split() == ["TOPIC", "OUTCOME", state, "exists", terms, "exists"]


def test_create_topics_refuses_a_topic_the_protocol_cannot_run_on_with_status_1(
        kafka_bootstrap):
    state, _ = names()
    assert cli("--bootstrap-servers", kafka_bootstrap, "--topic", state,
               "--partitions", str(PARTITIONS)).returncode == 0
    refused = cli("--bootstrap-servers", kafka_bootstrap, "--topic", state, "--partitions",
                  str(PARTITIONS + 1))
    assert refused.returncode == 1
    assert refused.stderr.splitlines() == [
        f"krabka: error: the state topic {state!r} has {PARTITIONS} partitions, but this "
        f"member is configured with partitions={PARTITIONS + 1}: configure every member with "
        f"partitions={PARTITIONS} (the real count; changing a state topic's partition count "
        "moves roles between partitions)"]


def test_the_start_up_refusal_of_a_missing_topic_names_the_command_that_creates_it(
        kafka_bootstrap):
    state, _ = names()
    missing = subprocess.run(
        [sys.executable, "-m", "krabka", "roles", "--bootstrap-servers", kafka_bootstrap,
         "--topic", state, "--partitions", str(PARTITIONS)],
        capture_output=True, text=True, timeout=90, cwd=ROOT, check=False)
    assert missing.returncode == 1
    command = missing.stderr.split("by running ", 1)[1].split(" (", 1)[0].split()
    assert command[:2] == ["krabka", "create-topics"]
    command[command.index("--partitions") + 1] = str(PARTITIONS)
    created = cli(*command[2:])
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["topics"] == [{"topic": state, "outcome": "created"}]


async def test_ensure_topics_on_a_sasl_ssl_cluster(secure_kafka: SecureCluster):
    state, terms = names()
    done = await ensure_topics(secure_kafka.connection("admin"), fencing="term", topic=state,
                               terms_topic=terms, partitions=PARTITIONS)
    assert done == {state: "created", terms: "created"}
    async with KafkaTransport(secure_kafka.bootstrap, topic=state, terms_topic=terms,
                              **secure_kafka.connection("admin").client_options()) as transport:
        await transport.check_topic(PARTITIONS, LEASE)
        await transport.check_terms_topic(PARTITIONS)


async def test_create_topics_on_a_sasl_ssl_cluster(secure_kafka: SecureCluster):
    state, terms = names()
    created = cli("--topic", state, "--terms-topic", terms, "--partitions", str(PARTITIONS),
                  "--fencing", "term", env=secure_kafka.env("admin"))
    assert created.returncode == 0, created.stderr
    assert {row["outcome"] for row in json.loads(created.stdout)["topics"]} == {"created"}
    async with KafkaTransport(secure_kafka.bootstrap, topic=state, terms_topic=terms,
                              **secure_kafka.connection("admin").client_options()) as transport:
        await transport.check_topic(PARTITIONS, LEASE)
        await transport.check_terms_topic(PARTITIONS)


async def test_a_principal_without_create_is_refused_naming_the_acl(
        secure_kafka: SecureCluster):
    state, _ = names()
    with pytest.raises(AccessDeniedError, match=rf"Topic `{state}`: Create"):
        await ensure_topics(secure_kafka.connection("limited"), topic=state,
                            partitions=PARTITIONS)

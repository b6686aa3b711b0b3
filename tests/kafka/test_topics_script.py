"""deploy/topics.py: the topics a worker group needs, term mode's terms topic among them.

The pure part (which topics, with what settings) is checked without a broker;
the script itself is run as the deploys run it, against the real broker, and
what it created is held to the library's own start-up checks. The state and
terms topics are the library's `ensure_topics`'s (tests/kafka/test_topics_kafka.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from deploy import topics
from krabka.defaults import TERMS_TOPIC
from krabka.kafka import KafkaTransport

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "topics.py"


def run(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "--bootstrap-servers", bootstrap, *args],
                          capture_output=True, text=True, timeout=60, check=False)


def test_the_terms_topic_is_compacted_like_the_state_topic_with_shorter_lived_tombstones():
    wanted = {spec.name: spec for spec in topics.specs(16, 3, 60_000, demo=False)}
    state, terms = wanted["__coordination_state"], wanted[TERMS_TOPIC]
    assert (state.kind, terms.kind) == ("state", "terms")
    assert (terms.partitions, terms.replication) == (16, 3)
    assert terms.configs == {**state.configs, "delete.retention.ms": "600000"}
    assert terms.configs["cleanup.policy"] == "compact"
    assert terms.configs["min.insync.replicas"] == "2"


def test_the_terms_topic_is_named_by_flag_or_by_the_environment(monkeypatch):
    assert TERMS_TOPIC in {s.name for s in topics.specs(4, 1, 60_000, demo=False)}
    assert "t" in {s.name for s in topics.specs(4, 1, 60_000, demo=False, terms_topic="t")}
    created: list[list[topics.TopicSpec]] = []

    async def record(connection, wanted):
        created.append(wanted)
        return {}

    monkeypatch.setattr(topics, "ensure", record)
    monkeypatch.setenv("COORDINATION_TERMS_TOPIC", "from-env")
    assert topics.main(["--bootstrap-servers", "127.0.0.1:9"]) == 0
    assert topics.main(["--bootstrap-servers", "127.0.0.1:9", "--terms-topic", "from-flag"]) == 0
    assert [[s.name for s in wanted if "from-" in s.name] for wanted in created] == [
        ["from-env"], ["from-flag"]]


def names() -> list[str]:
    suffix = uuid.uuid4().hex[:8]
    return [f"state-{suffix}", f"terms-{suffix}", f"events-{suffix}"]


@pytest.mark.integration
async def test_the_script_creates_a_terms_topic_term_mode_accepts(kafka_bootstrap):
    state, terms, events = names()
    flags = ["--partitions", "3", "--state-topic", state, "--terms-topic", terms,
             "--events-topic", events]
    first = run(kafka_bootstrap, *flags)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout) == {state: "created", terms: "created", events: "created"}
    async with KafkaTransport(kafka_bootstrap, topic=state, terms_topic=terms) as transport:
        await transport.check_topic(3, None)
        await transport.check_terms_topic(3)
    again = run(kafka_bootstrap, *flags)
    assert again.returncode == 0, again.stderr
    assert set(json.loads(again.stdout).values()) == {"exists"}


@pytest.mark.integration
async def test_the_script_refuses_a_terms_topic_with_a_delete_policy(kafka_bootstrap):
    state, terms, events = names()
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(terms, 3, 1, topic_configs={"cleanup.policy": "delete"})])
    finally:
        await admin.close()
    refused = run(kafka_bootstrap, "--partitions", "3", "--state-topic", state,
                  "--terms-topic", terms, "--events-topic", events)
    assert refused.returncode == 1
    assert (f"the terms topic {terms!r} has cleanup.policy='delete'; it must be exactly "
            "'compact'") in refused.stderr

"""``python -m coordination`` against the real broker."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import uuid

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from coordination import FencedError, acquire_leadership
from coordination.kafka import KafkaTransport
from tests.support.processes import ROOT

pytestmark = pytest.mark.integration

PARTITIONS = 4


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "coordination", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, check=False)


@pytest.fixture
async def state_topic(kafka_bootstrap):
    topic = f"state-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(topic, PARTITIONS, 1, topic_configs={"cleanup.policy": "compact"})])
    finally:
        await admin.close()
    return topic


@pytest.fixture
async def leader(kafka_bootstrap, state_topic):
    role = f"test.cli-{uuid.uuid4().hex[:8]}"
    async with KafkaTransport(kafka_bootstrap, topic=state_topic) as transport:
        leadership = await acquire_leadership(
            transport, role, "worker-1", partitions=PARTITIONS, lease_duration=10,
            renew_interval=2, challenge_stagger=1)
        yield leadership
        await leadership.resign()


def test_describe_reports_no_token_for_a_role_never_taken(kafka_bootstrap):
    result = cli("describe", "never.taken", "--bootstrap-servers", kafka_bootstrap)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"role": "never.taken", "state": "Unknown", "token": None}


def test_describe_reports_the_leaders_token(kafka_bootstrap, leader):
    result = cli("describe", leader.role, "--bootstrap-servers", kafka_bootstrap)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["token"] == {
        "producer_id": leader.token.producer_id, "producer_epoch": leader.token.producer_epoch}


def test_state_reports_the_roster_and_the_lease(kafka_bootstrap, state_topic, leader):
    result = cli("state", leader.role, "--topic", state_topic, "--partitions", str(PARTITIONS),
                 "--bootstrap-servers", kafka_bootstrap)
    assert result.returncode == 0, result.stderr
    state = json.loads(result.stdout)
    assert [entry["member"] for entry in state["roster"]] == ["worker-1"]
    assert state["lease"]["member"] == "worker-1"
    assert state["lease"]["tenure"] == leader.tenure


def test_state_with_a_wrong_partition_count_says_what_to_fix(kafka_bootstrap, state_topic):
    result = cli("state", "any.role", "--topic", state_topic, "--partitions", "16",
                 "--bootstrap-servers", kafka_bootstrap)
    assert result.returncode == 1
    assert "partitions" in result.stderr


async def test_fence_deposes_the_current_holder_at_once(kafka_bootstrap, state_topic, leader):
    result = cli("fence", leader.role, "--bootstrap-servers", kafka_bootstrap)
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["fenced"] == {"producer_id": leader.token.producer_id,
                                "producer_epoch": leader.token.producer_epoch}
    with pytest.raises(FencedError):
        async with leader.transaction() as txn:
            await txn.send(state_topic, b"never visible", partition=0)


def test_an_unreachable_broker_is_a_clear_error_within_30_seconds():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    started = time.monotonic()
    result = cli("describe", "any.role", "--bootstrap-servers", f"127.0.0.1:{closed_port}")
    assert time.monotonic() - started < 30
    assert result.returncode == 2
    assert f"127.0.0.1:{closed_port}" in result.stderr


def test_a_missing_command_is_a_usage_error():
    result = cli()
    assert result.returncode == 2
    assert "usage" in result.stderr

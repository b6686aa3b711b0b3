"""Leadership across real processes on the real broker (examples/leader_service.py)."""

from __future__ import annotations

import json
import signal
import uuid

import pytest

from coordination import FencingToken, describe_leadership, describe_role_state
from coordination.kafka import KafkaTransport
from tests.support.kafka_io import create_state_and_output_topics, read_committed
from tests.support.polling import eventually
from tests.support.processes import Service

pytestmark = pytest.mark.integration

PARTITIONS = 4
LEASE = 3.0
TIMEOUT = 60


@pytest.fixture
async def topics(kafka_bootstrap):
    """A fresh state topic and output topic for one test."""
    return await create_state_and_output_topics(kafka_bootstrap, PARTITIONS)


@pytest.fixture
def services(kafka_bootstrap, topics):
    """Start leader services of one role; every one is stopped by PID at the end."""
    state, output = topics
    started: list[Service] = []
    role = f"test.role-{uuid.uuid4().hex[:8]}"

    def start(member: str) -> Service:
        service = Service(
            "--bootstrap-servers", kafka_bootstrap, "--role", role, "--member", member,
            "--topic", state, "--output", output, "--partitions", str(PARTITIONS),
            "--lease", str(LEASE), "--renew", "1", "--stagger", "0.5", "--interval", "0.1",
        )
        started.append(service)
        return service

    start.role = role
    yield start
    for service in started:
        service.stop()


async def role_state(bootstrap, topic, role):
    async with KafkaTransport(bootstrap, topic=topic) as transport:
        return await describe_role_state(transport, role, PARTITIONS)


async def wait_roster(bootstrap, topic, role, members):
    return await eventually(lambda: role_state(bootstrap, topic, role),
                            lambda state: state.roster == members, within=TIMEOUT)


async def committed_output(bootstrap, topic):
    return [(r.offset, json.loads(r.value)) for r in await read_committed(bootstrap, topic)]

async def test_the_first_registered_leads_and_the_others_take_over_in_rank_order(
    kafka_bootstrap, topics, services
):
    state_topic, _ = topics
    a = services("a")
    a.wait_for("leading", TIMEOUT)
    b = services("b")
    await wait_roster(kafka_bootstrap, state_topic, services.role, ["a", "b"])
    c = services("c")
    await wait_roster(kafka_bootstrap, state_topic, services.role, ["a", "b", "c"])
    assert not b.has("leading")
    assert not c.has("leading")

    a.signal(signal.SIGKILL)
    a.process.wait(TIMEOUT)
    after_kill = await role_state(kafka_bootstrap, state_topic, services.role)
    took_over = b.wait_for("leading", TIMEOUT)
    assert after_kill.holder == "a"
    assert took_over["t_ms"] >= after_kill.lease.deadline
    b.wait_for("wrote", TIMEOUT)
    assert not c.has("leading")

    b.signal(signal.SIGKILL)
    c.wait_for("leading", TIMEOUT)


async def test_resign_hands_over_before_the_old_deadline_and_deauthorises_the_token(
    kafka_bootstrap, topics, services
):
    state_topic, _ = topics
    a = services("a")
    leading = a.wait_for("leading", TIMEOUT)
    b = services("b")
    await wait_roster(kafka_bootstrap, state_topic, services.role, ["a", "b"])
    before = await role_state(kafka_bootstrap, state_topic, services.role)
    a.signal(signal.SIGTERM)
    a.wait_for("resigned", TIMEOUT)
    async with KafkaTransport(kafka_bootstrap, topic=state_topic) as transport:
        status = await describe_leadership(transport, services.role)
    old = FencingToken(leading["producer_id"], leading["producer_epoch"])
    assert not status.authoritative(old)
    took_over = b.wait_for("leading", TIMEOUT)
    assert took_over["t_ms"] < before.lease.deadline


async def test_a_paused_leader_cannot_commit_after_its_successor_and_leaves_no_tombstone(
    kafka_bootstrap, topics, services
):
    state_topic, output = topics
    a = services("a")
    a.wait_for("leading", TIMEOUT)
    a.wait_for("wrote", TIMEOUT)
    b = services("b")
    await wait_roster(kafka_bootstrap, state_topic, services.role, ["a", "b"])
    a.signal(signal.SIGSTOP)
    successor = b.wait_for("leading", TIMEOUT)
    b.wait_for("wrote", TIMEOUT)
    a.signal(signal.SIGCONT)
    a.wait_for("fenced", TIMEOUT)

    records = await committed_output(kafka_bootstrap, output)
    first_of_b = min(off for off, r in records if r["tenure"] == successor["tenure"])
    assert all(r["member"] == "b" for off, r in records if off > first_of_b)
    state = await role_state(kafka_bootstrap, state_topic, services.role)
    assert state.holder == "b"
    assert state.tenure == successor["tenure"]

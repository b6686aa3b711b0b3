"""Leadership across real processes on the real broker (examples/leader_service.py),
in both fencing modes: the same scenarios, each mode read through its own means
(epoch mode's lease and transaction coordinator, term mode's terms topic and a
`TermFilter` over the output)."""

from __future__ import annotations

import json
import signal
import uuid
from dataclasses import dataclass
from typing import Any

import pytest

from krabka import FencingToken, describe_leadership, describe_role_state
from krabka.kafka import KafkaTransport
from krabka.kafka.protocol.messages import TRANSACTIONAL_ID_NOT_FOUND
from krabka.options import FENCINGS
from tests.support.kafka_io import (
    create_state_and_output_topics,
    read_committed,
    term_filtered,
    terms_topic_of,
    terms_view,
    transactional_id_error,
)
from tests.support.polling import eventually
from tests.support.processes import Service

pytestmark = pytest.mark.integration

PARTITIONS = 4
LEASE = 3.0
TIMEOUT = 60


@pytest.fixture
async def topics(kafka_bootstrap):
    """A fresh state topic (its terms topic beside it) and output topic for one test."""
    return await create_state_and_output_topics(kafka_bootstrap, PARTITIONS)


@pytest.fixture(params=FENCINGS)
def fencing(request) -> str:
    """Every test runs in both fencing modes."""
    return request.param


@pytest.fixture
def services(kafka_bootstrap, topics, fencing):
    """Start leader services of one role; every one is stopped by PID at the end."""
    state, output = topics
    started: list[Service] = []
    role = f"test.role-{uuid.uuid4().hex[:8]}"

    def start(member: str) -> Service:
        service = Service(
            "--bootstrap-servers", kafka_bootstrap, "--role", role, "--member", member,
            "--topic", state, "--terms-topic", terms_topic_of(state), "--output", output,
            "--fencing", fencing, "--partitions", str(PARTITIONS),
            "--lease", str(LEASE), "--renew", "1", "--stagger", "0.5", "--interval", "0.1",
        )
        started.append(service)
        return service

    start.role = role
    yield start
    for service in started:
        service.stop()


@dataclass(frozen=True)
class Held:
    """Who holds the role now, since which tenure, and until when without a renewal."""

    holder: str | None
    tenure: int | None
    deadline: int
    """Epoch ms: the lease's deadline, or the last heartbeat's send time plus the
    election timeout (no standby claims before it)."""


async def held(bootstrap: str, state_topic: str, role: str, fencing: str) -> Held:
    if fencing == "epoch":
        state = await role_state(bootstrap, state_topic, role)
        return Held(state.holder, state.tenure, state.lease.deadline)
    view = await terms_view(bootstrap, state_topic, role, PARTITIONS)
    claim = view.winner(view.term)
    assert claim is not None
    last_sign = view.heartbeat.sent_at if view.heartbeat is not None else claim.timestamp
    return Held(view.holder, claim.offset, last_sign + round(LEASE * 1000))


async def authoritative(bootstrap: str, state_topic: str, role: str, fencing: str,
                        leading: dict[str, Any]) -> bool:
    """Whether the tenure a ``leading`` event announced is still the role's current one."""
    if fencing == "epoch":
        async with KafkaTransport(bootstrap, topic=state_topic) as transport:
            status = await describe_leadership(transport, role)
        return status.authoritative(FencingToken(leading["producer_id"],
                                                 leading["producer_epoch"]))
    view = await terms_view(bootstrap, state_topic, role, PARTITIONS)
    return view.term == leading["term"] and not view.resigned


async def visible_output(bootstrap: str, topic: str, fencing: str) -> list[tuple[int, Any]]:
    """The output a reader of the mode delivers: read_committed in epoch mode,
    what a `TermFilter` passes in term mode."""
    if fencing == "epoch":
        return [(r.offset, json.loads(r.value)) for r in await read_committed(bootstrap, topic)]
    return [(r.offset, json.loads(r.value))
            for r, verdict in await term_filtered(bootstrap, topic) if verdict == "pass"]


async def assert_no_transactional_id_in_term_mode(bootstrap: str, role: str,
                                                  fencing: str) -> None:
    """Term mode never names the role in an InitProducerId; epoch mode does (the
    same question answers NONE there, so the check can tell the two apart)."""
    expected = TRANSACTIONAL_ID_NOT_FOUND if fencing == "term" else 0
    assert await transactional_id_error(bootstrap, role) == expected


async def role_state(bootstrap, topic, role):
    async with KafkaTransport(bootstrap, topic=topic) as transport:
        return await describe_role_state(transport, role, PARTITIONS)


async def wait_roster(bootstrap, topic, role, members):
    return await eventually(lambda: role_state(bootstrap, topic, role),
                            lambda state: state.roster == members, within=TIMEOUT)


async def test_the_first_registered_leads_and_the_others_take_over_in_rank_order(
    kafka_bootstrap, topics, services, fencing
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
    after_kill = await held(kafka_bootstrap, state_topic, services.role, fencing)
    took_over = b.wait_for("leading", TIMEOUT)
    assert after_kill.holder == "a"
    assert took_over["t_ms"] >= after_kill.deadline
    b.wait_for("wrote", TIMEOUT)
    assert not c.has("leading")

    b.signal(signal.SIGKILL)
    c.wait_for("leading", TIMEOUT)
    await assert_no_transactional_id_in_term_mode(kafka_bootstrap, services.role, fencing)


async def test_resign_hands_over_before_the_old_deadline_and_deauthorises_the_token(
    kafka_bootstrap, topics, services, fencing
):
    state_topic, _ = topics
    a = services("a")
    leading = a.wait_for("leading", TIMEOUT)
    b = services("b")
    await wait_roster(kafka_bootstrap, state_topic, services.role, ["a", "b"])
    before = await held(kafka_bootstrap, state_topic, services.role, fencing)
    a.signal(signal.SIGTERM)
    a.wait_for("resigned", TIMEOUT)
    assert not await authoritative(kafka_bootstrap, state_topic, services.role, fencing,
                                   leading)
    took_over = b.wait_for("leading", TIMEOUT)
    assert took_over["t_ms"] < before.deadline
    await assert_no_transactional_id_in_term_mode(kafka_bootstrap, services.role, fencing)


async def test_a_paused_leader_cannot_commit_after_its_successor_and_leaves_no_tombstone(
    kafka_bootstrap, topics, services, fencing
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

    records = await visible_output(kafka_bootstrap, output, fencing)
    first_of_b = min(off for off, r in records if r["tenure"] == successor["tenure"])
    assert all(r["member"] == "b" for off, r in records if off > first_of_b)
    now = await held(kafka_bootstrap, state_topic, services.role, fencing)
    assert now.holder == "b"
    assert now.tenure == successor["tenure"]
    await assert_no_transactional_id_in_term_mode(kafka_bootstrap, services.role, fencing)

"""Term-mode roles in `describe_leadership` and the operator CLI, against the real broker.

A term-mode leader claims its term on the terms topic and heartbeats there;
``--fencing term`` (or ``COORDINATION_FENCING=term``) makes describe, state,
roles and watch read that topic (docs/term-mode.md#observability).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator

import pytest

from krabka import TermToken, acquire_leadership, describe_leadership
from krabka.kafka import KafkaTransport
from krabka.term.tenure import TermLeadership
from tests.support.kafka_io import compacted_state_and_terms_topics
from tests.support.polling import eventually
from tests.support.processes import ROOT, Service

pytestmark = pytest.mark.integration

PARTITIONS = 4
LEASE = 10.0


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "krabka", *args], capture_output=True,
                          text=True, timeout=60, cwd=ROOT, check=False,
                          env={**os.environ, **(env or {})})


@pytest.fixture
async def topics(kafka_bootstrap: str) -> tuple[str, str]:
    """A state topic and a terms topic of `PARTITIONS` partitions, both compacted."""
    return await compacted_state_and_terms_topics(kafka_bootstrap, PARTITIONS)


@pytest.fixture
async def transport(kafka_bootstrap: str, topics: tuple[str, str]
                    ) -> AsyncIterator[KafkaTransport]:
    state, terms = topics
    async with KafkaTransport(kafka_bootstrap, topic=state, terms_topic=terms) as opened:
        yield opened


async def lead(transport: KafkaTransport, role: str) -> TermLeadership:
    leadership = await acquire_leadership(
        transport, role, "worker-1", partitions=PARTITIONS, lease_duration=LEASE,
        renew_interval=2, challenge_stagger=1, fencing="term")
    assert isinstance(leadership, TermLeadership)
    return leadership


@pytest.fixture
async def leader(transport: KafkaTransport) -> AsyncIterator[TermLeadership]:
    leadership = await lead(transport, f"test.term-cli-{uuid.uuid4().hex[:8]}")
    yield leadership
    await leadership.resign()


def flags(kafka_bootstrap: str, topics: tuple[str, str], *, judging: bool = True) -> list[str]:
    """The topics and broker; the election timeout for the commands that judge liveness."""
    state, terms = topics
    timeout = ["--lease-duration", str(LEASE)] if judging else []
    return ["--topic", state, "--terms-topic", terms, "--partitions", str(PARTITIONS),
            *timeout, "--bootstrap-servers", kafka_bootstrap]


async def test_describe_leadership_reads_the_leaders_term_and_live_heartbeats(
        transport, leader):
    status = await describe_leadership(transport, leader.role, fencing="term",
                                       partitions=PARTITIONS, election_timeout=LEASE)
    assert (status.token, status.holder, status.tenure) == (TermToken(1), "worker-1",
                                                            leader.tenure)
    assert (status.live, status.resigned) == (True, False)
    assert status.authoritative(leader.token)
    # The first heartbeat follows the claim by a renew interval.
    later = await eventually(
        lambda: describe_leadership(transport, leader.role, fencing="term",
                                    partitions=PARTITIONS, election_timeout=LEASE),
        lambda seen: seen.last_sign_at > seen.claimed_at, 15)
    assert later.live


async def test_a_resigned_term_is_described_as_resigned_and_not_authoritative(transport):
    leadership = await lead(transport, f"test.term-cli-{uuid.uuid4().hex[:8]}")
    await leadership.resign()
    status = await describe_leadership(transport, leadership.role, fencing="term",
                                       partitions=PARTITIONS, election_timeout=LEASE)
    assert (status.holder, status.resigned, status.live, status.status) == (
        "worker-1", True, False, "resigned")
    assert not status.authoritative(leadership.token)


def test_cli_describe_in_term_mode_reports_the_term_and_its_holder(
        kafka_bootstrap, topics, leader):
    result = cli("describe", leader.role, "--fencing", "term", *flags(kafka_bootstrap, topics))
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    assert {k: body[k] for k in ("role", "fencing", "member", "token", "tenure", "live",
                                 "resigned", "status")} == {
        "role": leader.role, "fencing": "term", "member": "worker-1", "token": {"term": 1},
        "tenure": leader.tenure, "live": True, "resigned": False, "status": "held"}
    assert body["now"] - body["last_sign_at"] < LEASE * 1000


def test_cli_state_in_term_mode_reports_the_roster_and_the_term(
        kafka_bootstrap, topics, leader):
    result = cli("state", leader.role, *flags(kafka_bootstrap, topics),
                 env={"COORDINATION_FENCING": "term"})
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    assert [entry["member"] for entry in body["roster"]] == ["worker-1"]
    assert (body["term"]["member"], body["term"]["token"]) == ("worker-1", {"term": 1})
    assert body["skipped"] == body["terms_skipped"] == []


def test_cli_roles_in_term_mode_lists_the_role_with_its_term(kafka_bootstrap, topics, leader):
    result = cli("roles", "--fencing", "term", *flags(kafka_bootstrap, topics))
    assert result.returncode == 0, result.stderr
    rows = {row["role"]: row for row in json.loads(result.stdout)["roles"]}
    assert {k: rows[leader.role][k] for k in ("holder", "token", "status", "members",
                                              "live", "resigned")} == {
        "holder": "worker-1", "token": {"term": 1}, "status": "held", "members": 1,
        "live": True, "resigned": False}


def test_cli_describe_with_a_wrong_terms_topic_says_what_to_fix(kafka_bootstrap, topics):
    state, _ = topics
    result = cli("describe", "any.role", "--fencing", "term", "--topic", state,
                 "--terms-topic", f"missing-{uuid.uuid4().hex[:8]}",
                 "--partitions", str(PARTITIONS), "--bootstrap-servers", kafka_bootstrap)
    assert result.returncode == 1
    assert "terms topic" in result.stderr


async def test_cli_watch_in_term_mode_prints_elections_and_resigns_from_the_terms_topic(
        kafka_bootstrap, topics, transport, monkeypatch):
    monkeypatch.setenv("COORDINATION_FENCING", "term")
    role = f"test.term-watch-{uuid.uuid4().hex[:8]}"
    watcher = Service("watch", role, *flags(kafka_bootstrap, topics, judging=False),
                      program=["-m", "krabka"])
    try:
        await eventually(lambda: _lines(watcher.stderr), lambda err: "following" in err, 30)
        first = await lead(transport, role)
        await first.resign(deregister=False)
        second = await lead(transport, role)
        await second.resign()
        events = await eventually(lambda: _copy(watcher.events), lambda seen: (
            sum(e["kind"] in ("elected", "resigned") for e in seen) >= 4
            and any(e["kind"] == "member-left" for e in seen)), 30)
    finally:
        status = watcher.stop()
    terms = [(e["kind"], e["member"], e["token"], e["previous_token"]) for e in events
             if e["kind"] in ("elected", "resigned")]
    assert terms == [("elected", "worker-1", {"term": 1}, None),
                     ("resigned", "worker-1", {"term": 1}, None),
                     ("elected", "worker-1", {"term": 2}, {"term": 1}),
                     ("resigned", "worker-1", {"term": 2}, None)]
    elected = [e for e in events if e["kind"] == "elected"]
    assert [e["tenure"] for e in elected] == [first.tenure, second.tenure]
    assert elected[1]["previous_holder"] == "worker-1"
    # Registrations stay on the state topic: its watch still reports them.
    roster = [(e["kind"], e["member"]) for e in events if e["kind"].startswith("member-")]
    assert roster[0] == ("member-joined", "worker-1")
    assert roster[-1] == ("member-left", "worker-1")
    assert status == 0, "".join(watcher.stderr)


async def _lines(lines: list[str]) -> str:
    return "".join(lines)


async def _copy(events: list[dict]) -> list[dict]:
    return list(events)

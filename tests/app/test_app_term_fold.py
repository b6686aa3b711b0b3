"""The worker's fold of ``__coordination_terms``: a term-mode role's value, its events
and the web view's term fields, record by record through the value codec."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterable
from types import SimpleNamespace

import orjson
import pytest
from aiokafka.errors import RequestTimedOutError
from faust.exceptions import ProducerSendError

import agents.fold.agent
from agents.events import LeadershipEvent
from agents.fold import role_value
from agents.fold.agent import FOLD_RETRY_MS, apply_terms_record, until_applied
from agents.fold.role_value import MAX_TENURES, RoleValue
from agents.fold.rules import Unattributed, expire_term, fold, fold_terms, route_term
from app.factory import build
from app.settings import Settings
from app.web.term_view import term_detail, term_fields, term_status
from krabka import (
    STATE_TOPIC,
    Record,
    Registration,
    TermToken,
    encode_key,
    encode_registration,
    registration_key,
)
from krabka import role_partition as partition_of
from krabka.observe.events import describe
from krabka.testing import ManualClock, MemoryBroker, MemoryTransport
from tests.support.event_schema import published
from tests.support.faust_events import state_event
from tests.support.loop import run_ready_callbacks
from tests.support.term_logs import TermLog

PARTITIONS = 4
ROLE = "billing"
HOME = partition_of(ROLE, PARTITIONS)
TIMEOUT = 4_000  # the election timeout: the worker's lease duration in term mode


class TermFolder:
    """Folds one terms partition as the terms agent does, through the value codec."""

    def __init__(self) -> None:
        self.value: RoleValue | None = None
        self.events: list[LeadershipEvent] = []

    def apply(self, records: Iterable[Record]) -> list[LeadershipEvent]:
        new: list[LeadershipEvent] = []
        for record in records:
            value, events = fold_terms(self.value, record, HOME, PARTITIONS, TIMEOUT)
            assert value is not None
            self.value = role_value.decode(role_value.encode(value))
            new += events
        for event in new:
            published(event.encode())
        self.events += new
        return new

    def tick(self, now_ms: int) -> list[LeadershipEvent]:
        assert self.value is not None
        value, events = expire_term(self.value, now_ms, TIMEOUT)
        self.value = role_value.decode(role_value.encode(value))
        for event in events:
            published(event.encode())
        return events


def test_the_first_claim_of_a_term_is_elected_with_its_term_located_on_the_terms_topic():
    log, folder = TermLog(), TermFolder()
    claim = log.claim(ROLE, "a", 1)
    (elected,) = folder.apply([claim])
    assert elected.to_json() == {
        "schema": 1, "role": ROLE, "kind": "elected", "member": "a", "rank": None,
        "token": {"term": 1}, "tenure": claim.offset, "granted_at": claim.timestamp,
        "deadline": None, "previous_holder": None, "previous_token": None,
        "partition": HOME, "offset": claim.offset, "timestamp": claim.timestamp,
    }
    assert describe(elected.to_json()).endswith("a leads 'billing' (term 1)")


def test_a_later_claim_of_the_same_term_loses_and_is_no_event():
    log, folder = TermLog(), TermFolder()
    folder.apply([log.claim(ROLE, "a", 1)])
    assert folder.apply([log.claim(ROLE, "b", 1)]) == []
    assert folder.value is not None
    assert folder.value.terms is not None
    assert folder.value.terms.holder == "a"


def test_heartbeats_keep_the_holder_live_and_are_no_events():
    log, folder = TermLog(), TermFolder()
    folder.apply([log.claim(ROLE, "a", 1)])
    beat = log.heartbeat(ROLE, "a", 1)
    assert folder.apply([beat]) == []
    value = folder.value
    assert value is not None
    assert value.sign_timestamp == beat.timestamp
    assert term_status(value, beat.timestamp + TIMEOUT - 1, TIMEOUT) == "held"
    assert term_status(value, beat.timestamp + TIMEOUT, TIMEOUT) == "lapsed"
    fields = term_fields(value, beat.timestamp + 250, TIMEOUT)
    assert fields == {"fencing": "term", "holder": "a", "token": {"term": 1}, "term": 1,
                      "deadline": beat.timestamp + TIMEOUT, "status": "held",
                      "heartbeat_age": 250, "resigned": False}


def test_a_silent_holder_lapses_once_at_its_last_sign_and_a_new_sign_rearms_it():
    log, folder = TermLog(), TermFolder()
    folder.apply([log.claim(ROLE, "a", 1)])
    beat = log.heartbeat(ROLE, "a", 1)
    folder.apply([beat])
    assert folder.tick(beat.timestamp + TIMEOUT - 1) == []
    (lapsed,) = folder.tick(beat.timestamp + TIMEOUT)
    assert (lapsed.kind, lapsed.member, lapsed.token) == ("lapsed", "a", TermToken(1))
    assert (lapsed.offset, lapsed.timestamp) == (beat.offset, beat.timestamp)
    assert lapsed.deadline == beat.timestamp + TIMEOUT
    assert folder.tick(beat.timestamp + 10 * TIMEOUT) == []  # reported once
    later = log.heartbeat(ROLE, "a", 1)  # it was only slow: no new election
    assert folder.apply([later]) == []
    assert folder.tick(later.timestamp + TIMEOUT)[0].offset == later.offset


def test_a_claim_after_the_holder_s_silence_reports_the_lapse_then_the_election():
    log, folder = TermLog(), TermFolder()
    folder.apply([log.claim(ROLE, "a", 1)])
    for _ in range(5):  # five seconds of records of no role here: the holder is silent
        log.add(b"\x00", b"")
    claim = log.claim(ROLE, "b", 2)
    lapsed, elected = folder.apply([claim])
    assert (lapsed.kind, lapsed.member, lapsed.offset) == ("lapsed", "a", 0)
    assert (elected.kind, elected.member, elected.token) == ("elected", "b", TermToken(2))
    assert (elected.previous_holder, elected.previous_token) == ("a", TermToken(1))


def test_a_resign_is_an_event_and_leaves_the_role_vacant_with_its_last_holder():
    log, folder = TermLog(), TermFolder()
    folder.apply([log.claim(ROLE, "a", 1)])
    resign = log.resign(ROLE, "a", 1)
    (resigned,) = folder.apply([resign])
    assert (resigned.kind, resigned.member, resigned.token, resigned.offset) == (
        "resigned", "a", TermToken(1), resign.offset)
    value = folder.value
    assert value is not None
    assert folder.tick(resign.timestamp + 10 * TIMEOUT) == []  # a resigned term never lapses
    fields = term_fields(value, resign.timestamp, TIMEOUT)
    assert (fields["status"], fields["holder"], fields["resigned"]) == ("vacant", "a", True)


def test_a_replayed_record_changes_nothing():
    log, folder = TermLog(), TermFolder()
    claim = log.claim(ROLE, "a", 1)
    folder.apply([claim, log.heartbeat(ROLE, "a", 1)])
    before = role_value.encode(folder.value)  # type: ignore[arg-type]
    assert folder.apply([claim]) == []
    assert role_value.encode(folder.value) == before  # type: ignore[arg-type]


def test_the_terms_and_the_state_topic_fold_into_one_value():
    log, folder = TermLog(), TermFolder()
    registration = Record(0, encode_key(registration_key(ROLE, "a")),
                          encode_registration(Registration("a", 1)), 5)
    value, _ = fold(None, registration, HOME, PARTITIONS)
    folder.value = value
    (elected,) = folder.apply([log.claim(ROLE, "a", 1)])
    assert elected.rank == 0  # the rank is the state topic's roster
    assert folder.value is not None
    assert [e.member for e in folder.value.state.entries] == ["a"]
    assert folder.value.last_offset == 0  # the state topic's offsets stay apart
    assert folder.value.terms_offset == 0


def test_a_record_no_role_of_the_partition_owns_is_routed_out():
    elsewhere = next(f"r{i}" for i in range(100) if partition_of(f"r{i}", PARTITIONS) != HOME)
    log = TermLog()
    assert isinstance(route_term(log.claim(elsewhere, "a", 1), HOME, PARTITIONS), Unattributed)
    garbage = Record(1, b"\x00", b"x", 0)
    assert route_term(garbage, HOME, PARTITIONS).kind == "undecodable-key"  # type: ignore[union-attr]
    assert fold_terms(None, garbage, HOME, PARTITIONS, TIMEOUT) == (None, [])


def test_the_value_keeps_the_latest_terms_only():
    log, folder = TermLog(), TermFolder()
    folder.apply([log.claim(ROLE, "a", term) for term in range(1, MAX_TENURES + 11)])
    assert folder.value is not None
    assert folder.value.terms is not None
    assert sorted(folder.value.terms.winners) == list(range(11, MAX_TENURES + 11))
    assert folder.value.terms.holder == "a"
    detail = term_detail(folder.value, 0, TIMEOUT)
    assert detail["terms"]["term"] == MAX_TENURES + 10


# --- the terms agent: what it cannot store it folds again ---------------------------


class Delivered:
    """The events topic in term mode: each send is awaited, then its acknowledgement.
    The first ``elected`` fails `failing` (``"send"`` or ``"acknowledgement"``) once."""

    def __init__(self, failing: str | None = None) -> None:
        self.values: list[bytes] = []
        self.failing = failing

    async def send(self, *, key: bytes, value: bytes, partition: int) -> asyncio.Future[None]:
        acknowledged = asyncio.get_running_loop().create_future()
        failing, kind = self.failing, published(value)["kind"]
        if failing is not None and kind == "elected":
            self.failing = None
            if failing == "send":
                raise ProducerSendError("Error while sending: KafkaTimeoutError()")
            acknowledged.set_exception(RequestTimedOutError())
            return acknowledged
        self.values.append(value)
        acknowledged.set_result(None)
        return acknowledged


def term_ctx(events_topic: Delivered):
    clock = ManualClock(1_700_000_000_000)
    broker = MemoryBroker(clock=clock)
    broker.create_topic(STATE_TOPIC, PARTITIONS)
    settings = Settings(partitions=PARTITIONS, member_id="a", app_id="test-term-agent",
                        fencing="term")
    ctx = build(settings, store="memory://", roles={}, clock=clock,
                transport_factory=lambda: MemoryTransport(broker))
    ctx.tables = SimpleNamespace(role_state={}, partition_state={})
    ctx.events_topic = events_topic
    return ctx


async def fold_terms_as_the_agent_does(ctx, records: list) -> None:
    for record in records:
        event = state_event(record, HOME)
        apply = functools.partial(apply_terms_record, ctx, event.message)
        task = asyncio.ensure_future(until_applied(ctx, apply, [event], "the record"))
        for _ in range(10):
            await run_ready_callbacks()
            if task.done():
                break
            assert ctx.clock.next_wake_ms is not None, "neither done nor waiting to fold again"
            ctx.clock.advance_ms(FOLD_RETRY_MS)
        task.result()


def term_history() -> list:
    log = TermLog()
    log.claim(ROLE, "a", 1)
    log.heartbeat(ROLE, "a", 1)
    log.resign(ROLE, "a", 1)
    log.claim(ROLE, "b", 2)
    log.heartbeat(ROLE, "b", 2)
    return log.records


@pytest.mark.parametrize("failing", ["send", "acknowledgement"])
async def test_a_terms_event_that_fails_once_is_folded_again_and_tells_the_same_story(failing):
    """The terms agent skipped a record whose event it could not store: its value
    was never written, and the election went missing from the events topic."""
    records = term_history()
    expected = term_ctx(Delivered())
    await fold_terms_as_the_agent_does(expected, records)
    ctx = term_ctx(Delivered(failing))
    await fold_terms_as_the_agent_does(ctx, records)
    assert ctx.events_topic.failing is None  # it did fail once
    assert ctx.events_topic.values == expected.events_topic.values
    assert ctx.tables.role_state == expected.tables.role_state
    elected = [orjson.loads(v) for v in ctx.events_topic.values]
    assert [(e["member"], e["offset"]) for e in elected if e["kind"] == "elected"] == [
        ("a", records[0].offset), ("b", records[3].offset)]


async def test_a_terms_record_the_fold_fails_on_is_reported_and_skipped(monkeypatch, caplog):
    records = term_history()
    real_fold_terms = agents.fold.agent.fold_terms

    def failing_fold_terms(value, record, *args):
        if record.offset == records[1].offset:
            raise RuntimeError("a bug in the fold")
        return real_fold_terms(value, record, *args)

    monkeypatch.setattr(agents.fold.agent, "fold_terms", failing_fold_terms)
    ctx = term_ctx(Delivered())
    await fold_terms_as_the_agent_does(ctx, records)
    assert "the terms fold failed at partition" in caplog.text
    kinds = [orjson.loads(v)["kind"] for v in ctx.events_topic.values]
    assert kinds.count("elected") == 2  # the records after the failing one were folded

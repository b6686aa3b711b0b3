"""docs/events.schema.json describes exactly what the fold publishes: every kind
of event, in both fencing modes, as the fold builds and encodes it, matches it;
its fields are the event's; and each rule it states rejects an event that
breaks it. (The fold's other tests check each event they see against it too,
and the integration tests every event read back from the events topic.)"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from agents.events import KINDS, LeadershipEvent
from agents.fold.rules import expire
from tests.app.test_app_fold import ROLE, T1, T2, Folder
from tests.app.test_app_term_fold import TermFolder
from tests.support.event_schema import SCHEMA, VALIDATOR, published, violations
from tests.support.logs import Log
from tests.support.term_logs import TermLog


def epoch_story() -> list[LeadershipEvent]:
    """Every kind an epoch-mode role's fold reports, in one history."""
    log, folder = Log(), Folder()
    log.register(ROLE, "a", ts=0)
    log.register(ROLE, "b", ts=1)
    log.lease(ROLE, "a", T1, granted_at=10, deadline=30_000, ts=10)  # elected, the first
    folder.apply(log.records)
    value, events = expire(folder.value(), 30_000)  # lapsed, noticed by a tick
    folder.values[ROLE] = value
    folder.events += events
    folder.apply([log.lease(ROLE, "b", T2, granted_at=31_000, deadline=61_000, ts=31_000)])
    folder.apply([log.clear_lease(ROLE, ts=40_000)])  # resigned
    folder.apply([log.deregister(ROLE, "a", ts=41_000)])  # member-left
    return folder.events


def term_story() -> list[LeadershipEvent]:
    """Every kind a term-mode role's terms fold reports (its member events are the
    state topic's, as in epoch mode)."""
    log, folder = TermLog(), TermFolder()
    folder.apply([log.claim(ROLE, "a", 1)])
    beat = log.heartbeat(ROLE, "a", 1)
    folder.apply([beat])
    folder.events += folder.tick(beat.timestamp + 4_000)  # lapsed
    folder.apply([log.claim(ROLE, "b", 2)])  # elected, naming a
    folder.apply([log.resign(ROLE, "b", 2)])
    return folder.events


@pytest.mark.parametrize(("story", "kinds"), [
    (epoch_story, set(KINDS)),
    (term_story, {"elected", "lapsed", "resigned"}),
], ids=["epoch", "term"])
def test_every_kind_the_fold_publishes_matches_the_schema(story, kinds):
    events = story()
    assert {event.kind for event in events} == kinds
    elected = [event for event in events if event.kind == "elected"]
    assert {event.previous_holder is None for event in elected} == {True, False}
    for event in events:
        published(event.encode())


def test_the_schema_names_exactly_the_fields_of_an_event_all_required():
    (event, *_) = epoch_story()
    fields = set(event.to_json())
    assert set(SCHEMA["properties"]) == fields
    assert set(SCHEMA["required"]) == fields
    assert SCHEMA["additionalProperties"] is False


def test_the_schema_is_a_valid_draft_2020_12_schema():
    type(VALIDATOR).check_schema(SCHEMA)


def events_by_shape() -> dict[str, dict[str, Any]]:
    epoch, term = epoch_story(), term_story()

    def first(events: list[LeadershipEvent], kind: str, previous: bool = False) -> dict[str, Any]:
        return next(e.to_json() for e in events
                    if e.kind == kind and (e.previous_holder is not None) == previous)

    return {"joined": first(epoch, "member-joined"), "elected": first(epoch, "elected"),
            "re-elected": first(epoch, "elected", previous=True),
            "resigned": first(epoch, "resigned"), "term-elected": first(term, "elected"),
            "term-re-elected": first(term, "elected", previous=True),
            "term-lapsed": first(term, "lapsed")}


def set_(**fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda event: event.update(fields)


@pytest.mark.parametrize(("shape", "edit", "reported"), [
    ("elected", lambda e: e.pop("tenure"), "'tenure' is a required property"),
    ("elected", set_(holder="a"), "Additional properties are not allowed"),
    ("elected", set_(schema=2), "schema: 1 was expected"),
    ("elected", set_(kind="promoted"), "kind: 'promoted' is not one of"),
    ("elected", set_(role=""), "role: '' should be non-empty"),
    ("elected", set_(token=None), "token: None is not valid"),
    ("elected", set_(deadline=None), "deadline: None is not of type 'integer'"),
    ("elected", set_(token={"producer_id": 1, "producer_epoch": 40_000}), "token"),
    ("elected", set_(token={"producer_id": 1}), "token"),
    ("re-elected", set_(previous_token=None), "(event)"),
    ("re-elected", set_(previous_token={"term": 3}), "previous_token"),
    ("resigned", set_(previous_holder="a"), "previous_holder: 'a' is not of type 'null'"),
    ("joined", set_(token={"producer_id": 1, "producer_epoch": 0}), "token"),
    ("joined", set_(rank=None), "rank: None is not of type 'integer'"),
    ("term-elected", set_(deadline=5), "deadline: 5 is not of type 'null'"),
    ("term-elected", set_(token={"term": 0}), "token"),
    ("term-re-elected", set_(previous_token={"producer_id": 1, "producer_epoch": 0}),
     "previous_token"),
    ("term-lapsed", set_(deadline=None), "deadline: None is not of type 'integer'"),
], ids=["missing-field", "extra-field", "other-schema-version", "unknown-kind", "empty-role",
        "lease-event-without-token", "epoch-lease-without-deadline", "epoch-beyond-int16",
        "token-missing-its-epoch", "previous-holder-without-its-token",
        "previous-token-of-the-other-mode", "resigned-naming-a-previous-holder",
        "member-event-with-a-token", "member-event-without-rank", "term-elected-with-deadline",
        "term-zero", "term-previous-token-an-epoch", "term-lapse-without-deadline"])
def test_the_schema_rejects_an_event_that_breaks_one_of_its_rules(shape, edit, reported):
    event = copy.deepcopy(events_by_shape()[shape])
    assert violations(event) == []
    edit(event)
    problems = violations(event)
    assert any(p.startswith(reported) or reported in p for p in problems), problems

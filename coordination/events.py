"""Leadership-change events: the changes of a role's holder or roster that a
reader reports (schema in docs/events.md).

The worker's fold publishes them to ``coordination-leadership-changes`` and
``krabka-coordination watch`` prints them: both turn the fold's changes
(`coordination.changes`) into events here, so the two speak one schema.
One flat JSON object per event; every field is always present, null when it
does not apply to the kind. Subscribers dedupe by ``(role, kind, offset)``:
events can repeat after a fence of Faust's own producer (or, in term mode, a
replay of the at-least-once fold), and one source record can end one tenure
(``lapsed``) and start the next (``elected``).

In term mode (docs/term-mode.md) a role's holder changes on
``__coordination_terms``: `term_events` turns what a terms record changed in
the role's `TermView` into ``elected`` and ``resigned``, and `term_lapse` the
silence of its holder into ``lapsed``; those events carry the `term` and
locate their record on the terms topic, the member events stay the state
topic's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, assert_never

from coordination.changes import (
    Change,
    Elected,
    Joined,
    Left,
    Renewed,
    Resigned,
    Skipped,
    StillVacant,
)
from coordination.json_forms import token_json
from coordination.records import Lease
from coordination.state import RoleState
from coordination.term_fold import TermView
from coordination.token import FencingToken

__all__ = ["KINDS", "EventKind", "LeadershipEvent", "TermMark", "change_event", "describe",
           "lease_event", "term_events", "term_lapse"]

SCHEMA = 1

EventKind = Literal["elected", "resigned", "lapsed", "member-joined", "member-left"]
KINDS: tuple[EventKind, ...] = ("elected", "resigned", "lapsed", "member-joined", "member-left")


@dataclass(frozen=True, slots=True)
class LeadershipEvent:
    """One change of a role's holder or roster.

    `partition` and `offset` locate the source record in
    ``__coordination_state``: for ``lapsed`` it is the lease record whose
    deadline passed (so the event is the same whether a tick or the next
    record noticed the lapse); `timestamp` is that record's Kafka timestamp.
    A term-mode lease event (`term` set) locates its record on
    ``__coordination_terms`` instead: the winning claim, the resign, or the
    holder's last sign of life before its silence.
    """

    role: str
    kind: EventKind
    member: str | None
    partition: int
    offset: int
    timestamp: int
    token: FencingToken | None = None
    tenure: int | None = None
    granted_at: int | None = None
    deadline: int | None = None
    previous_holder: str | None = None
    previous_token: FencingToken | None = None
    rank: int | None = None
    term: int | None = None
    previous_term: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The event as published (see docs/events.md)."""
        return {
            "schema": SCHEMA,
            "role": self.role,
            "kind": self.kind,
            "member": self.member,
            "rank": self.rank,
            "token": token_json(self.token),
            "tenure": self.tenure,
            "granted_at": self.granted_at,
            "deadline": self.deadline,
            "previous_holder": self.previous_holder,
            "previous_token": token_json(self.previous_token),
            "term": self.term,
            "previous_term": self.previous_term,
            "partition": self.partition,
            "offset": self.offset,
            "timestamp": self.timestamp,
        }

    def encode(self) -> bytes:
        """The event's bytes on the events topic: its JSON form, compact UTF-8."""
        return json.dumps(self.to_json(), ensure_ascii=False, separators=(",", ":")).encode()


def change_event(state: RoleState, partition: int, change: Change | None) -> LeadershipEvent | None:
    """The event a change of `state` (already applied to it) is, if any.

    Renewals, vacancies that stay vacant and malformed records are none
    (docs/events.md).
    """
    match change:
        case None | Renewed() | StillVacant() | Skipped():
            return None
        case Joined():
            return LeadershipEvent(state.role, "member-joined", change.member, partition,
                                   change.offset, change.timestamp, rank=change.rank)
        case Left():
            return LeadershipEvent(state.role, "member-left", change.member, partition,
                                   change.offset, change.timestamp, rank=change.rank)
        case Elected():
            return lease_event("elected", state, partition, change.lease, change.tenure,
                               change.offset, change.timestamp, previous=change.previous)
        case Resigned():
            return lease_event("resigned", state, partition, change.lease, change.tenure,
                               change.offset, change.timestamp)
        case _:
            assert_never(change)


def lease_event(
    kind: EventKind,
    state: RoleState,
    partition: int,
    lease: Lease,
    tenure: int | None,
    offset: int,
    timestamp: int,
    previous: Lease | None = None,
) -> LeadershipEvent:
    """An event about `lease` (elected, resigned, lapsed); `rank` is its holder's in `state`."""
    rank, ranked = state.rank_of(lease.member)
    return LeadershipEvent(
        state.role,
        kind,
        lease.member,
        partition,
        offset,
        timestamp,
        token=_token(lease),
        tenure=tenure,
        granted_at=lease.granted_at,
        deadline=lease.deadline,
        previous_holder=None if previous is None else previous.member,
        previous_token=None if previous is None else _token(previous),
        rank=rank if ranked else None,
    )


@dataclass(frozen=True, slots=True)
class TermMark:
    """What a `TermView` said before a record: its term, holder and resign."""

    term: int = 0
    holder: str | None = None
    resigned: bool = False

    @classmethod
    def of(cls, view: TermView | None) -> TermMark:
        if view is None:
            return cls()
        return cls(view.term, view.holder, view.resigned)


def term_events(state: RoleState, partition: int, before: TermMark, view: TermView,
                offset: int, timestamp: int) -> list[LeadershipEvent]:
    """The events of the terms record at `offset`, folded into `view` (was `before`).

    A claim that won a higher term is ``elected`` (its previous holder and
    term, if any); the holder's resign is ``resigned``. `state` gives the
    member's rank (registrations stay on the state topic).
    """
    events = []
    if view.term > before.term:
        claim = view.winners[view.term]
        previous = before.term if before.term > 0 else None
        events.append(_term_event("elected", state, partition, view, offset, timestamp,
                                  granted_at=claim.timestamp,
                                  previous_holder=before.holder if previous else None,
                                  previous_term=previous))
    elif view.resigned and not before.resigned and view.term == before.term:
        events.append(_term_event("resigned", state, partition, view, offset, timestamp,
                                  granted_at=view.winners[view.term].timestamp))
    return events


def term_lapse(state: RoleState, partition: int, view: TermView, sign_timestamp: int,
               timeout_ms: int) -> LeadershipEvent | None:
    """``lapsed``, located at the holder's last sign of life, when nothing of the
    holder's followed it for `timeout_ms` (the election timeout): a standby may
    claim. None for a role never claimed or resigned."""
    if view.holder is None or view.resigned or view.sign_offset is None:
        return None
    return _term_event("lapsed", state, partition, view, view.sign_offset, sign_timestamp,
                       granted_at=view.winners[view.term].timestamp,
                       deadline=sign_timestamp + timeout_ms)


def _term_event(kind: EventKind, state: RoleState, partition: int, view: TermView,
                offset: int, timestamp: int, *, granted_at: int,
                deadline: int | None = None, previous_holder: str | None = None,
                previous_term: int | None = None) -> LeadershipEvent:
    holder = view.holder
    assert holder is not None
    rank, ranked = state.rank_of(holder)
    return LeadershipEvent(
        state.role, kind, holder, partition, offset, timestamp,
        tenure=view.winners[view.term].offset, granted_at=granted_at, deadline=deadline,
        previous_holder=previous_holder, rank=rank if ranked else None, term=view.term,
        previous_term=previous_term)


def describe(event: Mapping[str, Any]) -> str:
    """One readable line for a published event (its JSON form), for a terminal.

    The time is the source record's, in local time; a field the kind does
    not use is left out.
    """
    at = event.get("timestamp") or 0
    clock = time.strftime("%H:%M:%S", time.localtime(at / 1000)) + f".{at % 1000:03d}"
    role, member, kind = event.get("role"), event.get("member"), event.get("kind")
    token = (f"term {event['term']}" if event.get("term") is not None
             else _token_text(event.get("token")))
    if kind == "elected":
        text = f"{member} leads {role!r} ({token}"
        previous = event.get("previous_holder")
        text += f", after {previous})" if previous else ")"
    elif kind == "resigned":
        text = f"{member} resigned {role!r} ({token})"
    elif kind == "lapsed":
        text = f"the lease of {member} on {role!r} lapsed ({token})"
    elif kind == "member-joined":
        text = f"{member} stands for {role!r} (rank {event.get('rank')})"
    elif kind == "member-left":
        text = f"{member} no longer stands for {role!r}"
    else:
        text = f"{kind} {role!r} {member}"
    return f"{clock} {text}"


def _token(lease: Lease) -> FencingToken:
    return FencingToken(lease.producer_id, lease.producer_epoch)


def _token_text(token: Any) -> str:
    if not isinstance(token, Mapping):
        return "token none"
    return f"token {token.get('producer_id')}/{token.get('producer_epoch')}"

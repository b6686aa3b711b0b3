"""Leadership-change events: the changes of a role's holder or roster that a
reader reports (schema in docs/events.md).

The worker's fold publishes them to ``coordination-leadership-changes`` and
``krabka watch`` prints them: both turn the fold's changes
(`krabka.rules.changes`) into events here, so the two speak one schema.
One flat JSON object per event; every field is always present, null when it
does not apply to the kind. Subscribers dedupe by ``(role, kind, offset)``:
events can repeat after a fence of Faust's own producer, and one source record
can end one tenure (``lapsed``) and start the next (``elected``).

A term-mode role's ``elected`` and ``resigned`` come from its partition of
``__coordination_terms`` instead (`term_change_event`), and its ``lapsed``
from its holder's silence (`term_lapse`): the same fields, the token
``{"term": n}``, and the offset of the claim, resign or last sign of life
there. Events can also repeat after a replay of term mode's at-least-once
fold in the worker.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, assert_never

from krabka.format.records import Lease
from krabka.format.token import FencingToken, TermToken, Token
from krabka.observe.json_forms import token_json
from krabka.rules.changes import (
    Change,
    Elected,
    Joined,
    Left,
    Renewed,
    Resigned,
    Skipped,
    StillVacant,
)
from krabka.rules.state import RoleState
from krabka.term.fold import TermChange, TermElected, TermResigned, TermView

__all__ = ["KINDS", "EventKind", "LeadershipEvent", "change_event", "describe", "lease_event",
           "term_change_event", "term_lapse"]

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
    A term-mode ``elected`` or ``resigned`` locates its claim or resign in
    ``__coordination_terms``, and its tokens are `TermToken`.
    """

    role: str
    kind: EventKind
    member: str | None
    partition: int
    offset: int
    timestamp: int
    token: Token | None = None
    tenure: int | None = None
    granted_at: int | None = None
    deadline: int | None = None
    previous_holder: str | None = None
    previous_token: Token | None = None
    rank: int | None = None

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


def term_change_event(role: str, partition: int, change: TermChange,
                      rank: int | None = None) -> LeadershipEvent:
    """The event a term-mode change of `role` (`TermFold.apply`) is.

    ``elected``: the winning claim's member, term, offset (the tenure, as
    `TermLeadership.tenure` is) and Kafka timestamp (as `granted_at`), and
    the previous term's holder. ``resigned``: the resigned term's, located
    at the resign. There is no lease, so no `deadline`. The roster is on the
    state topic, with no order shared with this one: `rank` is the member's
    rank there as the caller last folded it (the worker does), or None.
    """
    claim = change.claim
    token = TermToken(claim.term)
    match change:
        case TermElected():
            previous = change.previous
            return LeadershipEvent(
                role, "elected", claim.member, partition, claim.offset, claim.timestamp,
                token=token, tenure=claim.offset, granted_at=claim.timestamp,
                previous_holder=None if previous is None else previous.member,
                previous_token=None if previous is None else TermToken(previous.term),
                rank=rank)
        case TermResigned():
            return LeadershipEvent(role, "resigned", claim.member, partition, change.offset,
                                   change.timestamp, token=token, tenure=claim.offset,
                                   granted_at=claim.timestamp, rank=rank)
        case _:
            assert_never(change)


def term_lapse(role: str, partition: int, view: TermView, sign_timestamp: int,
               timeout_ms: int, rank: int | None = None) -> LeadershipEvent | None:
    """``lapsed``, located at the holder's last sign of life, when nothing of the
    holder's followed it for `timeout_ms` (the election timeout): a standby may
    claim. None for a role never claimed, or resigned.

    Like epoch mode's, a lapse is a judgement of time: the caller decides
    when the silence has lasted (`deadline` is the sign's timestamp plus the
    timeout).
    """
    claim = view.winner(view.term)
    if claim is None or view.resigned or view.sign_offset is None:
        return None
    return LeadershipEvent(role, "lapsed", claim.member, partition, view.sign_offset,
                           sign_timestamp, token=TermToken(claim.term), tenure=claim.offset,
                           granted_at=claim.timestamp, deadline=sign_timestamp + timeout_ms,
                           rank=rank)


def describe(event: Mapping[str, Any]) -> str:
    """One readable line for a published event (its JSON form), for a terminal.

    The time is the source record's, in local time; a field the kind does
    not use is left out.
    """
    at = event.get("timestamp") or 0
    clock = time.strftime("%H:%M:%S", time.localtime(at / 1000)) + f".{at % 1000:03d}"
    role, member, kind = event.get("role"), event.get("member"), event.get("kind")
    token = _token_text(event.get("token"))
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
    if "term" in token:
        return f"term {token.get('term')}"
    return f"token {token.get('producer_id')}/{token.get('producer_epoch')}"

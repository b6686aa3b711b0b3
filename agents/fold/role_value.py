"""The value of the ``role_state`` table: one role's `krabka.rules.state.RoleState`,
as an orjson object.

The table is keyed by the role's raw UTF-8 bytes; this module is its value
codec and nothing else (no Faust import, no fold rule: the state is the
library's, folded by `krabka.rules.fold.RoleFold`). Beside the state a value holds
what the fold agent needs to emit each event exactly once: the partition it
was folded from, whether the latest lease's lapse was reported, and the last
applied offset.

Two things are bounded so a value stays small enough to rewrite on every
renewal (each write goes to the changelog): the token history used to find a
tenure (`MAX_TENURES`) and the list of recent errors (`MAX_ERRORS`;
`RoleState.skipped` keeps the full count). The fold agent passes both to
`RoleFold`.

In term mode (``COORDINATION_FENCING=term``) the value also holds the role's
`krabka.term.fold.TermView`, folded from ``__coordination_terms`` by
`krabka.term.fold.TermFold` (the election's own rule), with the last terms offset
applied, the Kafka timestamp of the holder's latest sign of life and whether
its silence was reported; the terms kept are bounded like the tokens
(`MAX_TENURES`), since the fold only ever looks up the highest one.

Status (held / lapsed / vacant) is never stored: it depends on the time of the
read, and a Faust table can only be written while processing an event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from krabka import FencingToken
from krabka.format.records import Lease
from krabka.format.terms import Heartbeat
from krabka.rules.state import OutOfOrder, RoleState, RosterEntry
from krabka.term.fold import TermClaim, TermView

__all__ = ["MAX_ERRORS", "MAX_TENURES", "SCHEMA", "RoleValue", "decode", "encode"]

SCHEMA = 2
"""2 since the value is the library's `RoleState`
(see docs/decisions/0003-the-workers-table-value.md)."""
MAX_TENURES = 64
"""Tokens remembered with the offset of their first lease record. A real
coordinator never hands out a token twice, so only the current token's entry
is ever looked up again; the bound only matters for a log in which an old
token reappears after 64 others (see docs/app.md)."""
MAX_ERRORS = 16
"""Recent skipped records kept with their reason; older ones are only counted."""


@dataclass(slots=True)
class RoleValue:
    """One role's table value (before orjson).

    `state` is what `krabka.build_role_state` says of the role after
    the records folded so far (with the bounds above); `partition` is the
    state partition they came from; `lapse_reported` is whether the lapse of
    `state.lease` was reported; `last_offset` is the last record folded.
    """

    state: RoleState
    partition: int
    lapse_reported: bool = False
    last_offset: int = -1
    terms: TermView | None = None
    """The role's term view (None: no record of it on the terms topic folded)."""
    terms_offset: int = -1
    """The last terms-topic record folded."""
    sign_timestamp: int | None = None
    """The Kafka timestamp of the record at ``terms.sign_offset``."""
    term_lapse_reported: bool = False
    """Whether the holder's silence since that sign was reported (``lapsed``)."""


def encode(value: RoleValue) -> bytes:
    """The table value bytes: an orjson object with a schema number."""
    state = value.state
    return orjson.dumps({
        "schema": SCHEMA,
        "partition": value.partition,
        "lapse_reported": value.lapse_reported,
        "last_offset": value.last_offset,
        "state": {
            "role": state.role,
            "roster": [[e.member, e.offset, e.registered_at, e.timestamp]
                       for e in state.entries],
            "lease": _lease_json(state.lease),
            "tenure": state.tenure,
            "errors": [list(e) for e in state.errors],
            "skipped": state.skipped,
            "cleared": _lease_json(state.cleared),
            "vacant_since": state.vacant_since,
            "lease_offset": state.lease_offset,
            "lease_timestamp": state.lease_timestamp,
            "tenures": [[t.producer_id, t.producer_epoch, offset]
                        for t, offset in state.tenures.items()],
            "misplaced": state.misplaced,
            "out_of_order": state.out_of_order,
            "last_out_of_order": _out_of_order_json(state.last_out_of_order),
        },
        **({} if value.terms is None else {"terms": {
            **_terms_json(value.terms),
            "offset": value.terms_offset,
            "sign_timestamp": value.sign_timestamp,
            "lapse_reported": value.term_lapse_reported,
        }}),
    })


def decode(data: bytes) -> RoleValue:
    """The value in `data`; raises `ValueError` for bytes this module did not write."""
    try:
        obj = orjson.loads(data)
        if obj.get("schema") != SCHEMA:
            raise ValueError(f"unsupported role_state schema {obj.get('schema')!r}")
        state = obj["state"]
        return RoleValue(
            state=RoleState(
                role=str(state["role"]),
                entries=[RosterEntry(str(m), int(o), int(r), int(t))
                         for m, o, r, t in state["roster"]],
                lease=_lease_from(state["lease"]),
                tenure=_int_or_none(state["tenure"]),
                errors=[(int(o), str(r)) for o, r in state["errors"]],
                skipped=int(state["skipped"]),
                cleared=_lease_from(state["cleared"]),
                vacant_since=_int_or_none(state["vacant_since"]),
                lease_offset=_int_or_none(state["lease_offset"]),
                lease_timestamp=_int_or_none(state["lease_timestamp"]),
                tenures={FencingToken(int(p), int(e)): int(o) for p, e, o in state["tenures"]},
                misplaced=int(state["misplaced"]),
                # Absent from values written before the placement check: none seen.
                out_of_order=int(state.get("out_of_order", 0)),
                last_out_of_order=_out_of_order_from(state.get("last_out_of_order")),
            ),
            partition=int(obj["partition"]),
            lapse_reported=bool(obj["lapse_reported"]),
            last_offset=int(obj["last_offset"]),
            **_terms_from(str(state["role"]), obj.get("terms")),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a role_state value: {exc}") from None


def _int_or_none(obj: Any) -> int | None:
    return None if obj is None else int(obj)


def _out_of_order_json(seen: OutOfOrder | None) -> list[Any] | None:
    if seen is None:
        return None
    return [seen.offset, seen.member, seen.granted_at, seen.slot, seen.placement]


def _out_of_order_from(obj: list[Any] | None) -> OutOfOrder | None:
    if obj is None:
        return None
    offset, member, granted_at, slot, placement = obj
    return OutOfOrder(int(offset), str(member), int(granted_at), int(slot), str(placement))


def _lease_json(lease: Lease | None) -> list[Any] | None:
    if lease is None:
        return None
    return [lease.member, lease.producer_id, lease.producer_epoch, lease.granted_at,
            lease.deadline]


def _lease_from(obj: list[Any] | None) -> Lease | None:
    if obj is None:
        return None
    member, producer_id, producer_epoch, granted_at, deadline = obj
    return Lease(str(member), int(producer_id), int(producer_epoch), int(granted_at),
                 int(deadline))


def _terms_json(view: TermView) -> dict[str, Any]:
    # The latest MAX_TENURES wins: the fold compares a claim with the highest
    # term only, and a heartbeat with the highest term's winner.
    kept = sorted(view.winners)[-MAX_TENURES:]
    heartbeat = view.heartbeat
    return {
        "term": view.term,
        "winners": [[t, view.winners[t].member, view.winners[t].offset,
                     view.winners[t].timestamp] for t in kept],
        "heartbeat": None if heartbeat is None else [
            heartbeat.member, heartbeat.term, heartbeat.sent_at, heartbeat.resigned],
        "heartbeat_offset": view.heartbeat_offset,
        "sign_offset": view.sign_offset,
        "errors": [list(e) for e in view.errors[-MAX_ERRORS:]],
    }


def _terms_from(role: str, obj: dict[str, Any] | None) -> dict[str, Any]:
    if obj is None:
        return {}
    heartbeat = obj["heartbeat"]
    view = TermView(
        role,
        term=int(obj["term"]),
        winners={int(t): TermClaim(str(m), int(t), int(o), int(ts))
                 for t, m, o, ts in obj["winners"]},
        heartbeat=None if heartbeat is None else Heartbeat(
            str(heartbeat[0]), int(heartbeat[1]), int(heartbeat[2]), bool(heartbeat[3])),
        heartbeat_offset=_int_or_none(obj["heartbeat_offset"]),
        sign_offset=_int_or_none(obj["sign_offset"]),
        errors=[(int(o), str(r)) for o, r in obj["errors"]],
    )
    return {"terms": view, "terms_offset": int(obj["offset"]),
            "sign_timestamp": _int_or_none(obj["sign_timestamp"]),
            "term_lapse_reported": bool(obj["lapse_reported"])}

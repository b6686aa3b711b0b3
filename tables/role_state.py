"""The value of the ``role_state`` table: one role's state, as an orjson dict.

The table is keyed by the role's raw UTF-8 bytes; this module is its value
codec and nothing else (no Faust import). A value holds what
`coordination.build_role_state` would say of the role after the records folded
so far, plus what the fold needs to emit events exactly once (the last lease
seen, whether its lapse was reported, the last applied offset).

Two things are bounded so a value stays small enough to rewrite on every
renewal (each write goes to the changelog): the token history used to find a
tenure (`MAX_TENURES`, see `RoleValue.tenures`) and the list of recent errors
(`MAX_ERRORS`; `skipped` keeps the full count).

Status (held / lapsed / vacant) is never stored: it depends on the time of the
read, and a Faust table can only be written while processing an event.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from coordination import FencingToken, Lease, RosterEntry

__all__ = [
    "MAX_ERRORS",
    "MAX_TENURES",
    "SCHEMA",
    "LeaseValue",
    "RoleValue",
    "Status",
    "decode",
    "encode",
    "status",
]

SCHEMA = 1
MAX_TENURES = 64
"""Tokens remembered with the offset of their first lease record. A real
coordinator never hands out a token twice, so only the current token's entry
is ever looked up again; the bound only matters for a log in which an old
token reappears after 64 others (see docs/app.md)."""
MAX_ERRORS = 16
"""Recent skipped records kept with their reason; older ones are only counted."""

Status = Literal["held", "lapsed", "vacant"]


@dataclass(frozen=True, slots=True)
class LeaseValue:
    """A lease record as folded: the lease and the offset it was read at."""

    member: str
    producer_id: int
    producer_epoch: int
    granted_at: int
    deadline: int
    offset: int
    timestamp: int

    @property
    def token(self) -> FencingToken:
        """The lease's fencing token."""
        return FencingToken(self.producer_id, self.producer_epoch)

    def to_lease(self) -> Lease:
        """The library's `Lease` for this value."""
        return Lease(self.member, self.producer_id, self.producer_epoch, self.granted_at,
                     self.deadline)


@dataclass(slots=True)
class RoleValue:
    """One role's folded state (the table value, before orjson).

    `roster` is in rank order (the offset order of each member's latest
    registration). `lease` is the latest lease record, None in a vacancy or
    before any lease. `last_lease` is the latest lease *value* ever folded,
    kept after a tombstone so the next `elected` event can name the previous
    holder and so a vacancy knows whose lease was cleared. `tenures` maps
    tokens to the offset of their first lease record, oldest first.
    """

    role: str
    partition: int
    roster: list[RosterEntry] = field(default_factory=list)
    lease: LeaseValue | None = None
    tenure: int | None = None
    tenures: list[tuple[int, int, int]] = field(default_factory=list)
    last_lease: LeaseValue | None = None
    lease_offset: int | None = None
    vacant_since: int | None = None
    lapse_reported: bool = False
    skipped: int = 0
    errors: list[tuple[int, str]] = field(default_factory=list)
    last_offset: int = -1

    @property
    def holder(self) -> str | None:
        """The member of the latest lease record, live or lapsed."""
        return None if self.lease is None else self.lease.member

    @property
    def cleared_member(self) -> str | None:
        """In a vacancy: the member whose lease the tombstone cleared."""
        if self.lease is None and self.last_lease is not None:
            return self.last_lease.member
        return None

    @property
    def last_error(self) -> tuple[int, str] | None:
        """The latest skipped record of this role, as ``(offset, reason)``."""
        return self.errors[-1] if self.errors else None

    def rank_of(self, member: str) -> int | None:
        """`member`'s roster index, or None when it is not registered."""
        for rank, entry in enumerate(self.roster):
            if entry.member == member:
                return rank
        return None


def status(value: RoleValue, now_ms: int) -> Status:
    """held while the lease is live at `now_ms`, lapsed after its deadline, else vacant."""
    if value.lease is None:
        return "vacant"
    return "held" if now_ms < value.lease.deadline else "lapsed"


def encode(value: RoleValue) -> bytes:
    """The table value bytes: an orjson object with a schema number."""
    return orjson.dumps({
        "schema": SCHEMA,
        "role": value.role,
        "partition": value.partition,
        "roster": [
            [e.member, e.offset, e.registered_at, e.timestamp] for e in value.roster
        ],
        "lease": _lease_json(value.lease),
        "tenure": value.tenure,
        "tenures": [list(t) for t in value.tenures],
        "last_lease": _lease_json(value.last_lease),
        "lease_offset": value.lease_offset,
        "vacant_since": value.vacant_since,
        "lapse_reported": value.lapse_reported,
        "skipped": value.skipped,
        "errors": [list(e) for e in value.errors],
        "last_offset": value.last_offset,
    })


def decode(data: bytes) -> RoleValue:
    """The value in `data`; raises `ValueError` for bytes this module did not write."""
    try:
        obj = orjson.loads(data)
        if obj.get("schema") != SCHEMA:
            raise ValueError(f"unsupported role_state schema {obj.get('schema')!r}")
        return RoleValue(
            role=str(obj["role"]),
            partition=int(obj["partition"]),
            roster=[RosterEntry(str(m), int(o), int(r), int(t)) for m, o, r, t in obj["roster"]],
            lease=_lease_from(obj["lease"]),
            tenure=obj["tenure"],
            tenures=[(int(p), int(e), int(o)) for p, e, o in obj["tenures"]],
            last_lease=_lease_from(obj["last_lease"]),
            lease_offset=obj["lease_offset"],
            vacant_since=obj["vacant_since"],
            lapse_reported=bool(obj["lapse_reported"]),
            skipped=int(obj["skipped"]),
            errors=[(int(o), str(r)) for o, r in obj["errors"]],
            last_offset=int(obj["last_offset"]),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a role_state value: {exc}") from None


def _lease_json(lease: LeaseValue | None) -> list[Any] | None:
    if lease is None:
        return None
    return [lease.member, lease.producer_id, lease.producer_epoch, lease.granted_at,
            lease.deadline, lease.offset, lease.timestamp]


def _lease_from(obj: list[Any] | None) -> LeaseValue | None:
    if obj is None:
        return None
    member, producer_id, producer_epoch, granted_at, deadline, offset, timestamp = obj
    return LeaseValue(str(member), int(producer_id), int(producer_epoch), int(granted_at),
                      int(deadline), int(offset), int(timestamp))

"""A role's state, as folded from its partition of ``__coordination_state``.

The log is the referee: rank is the offset of a member's latest registration,
the holder is the member of the latest lease record. The rules that fold
records into this state are in `krabka.rules.fold`; nothing here reads a
clock: `evaluate` decides what a member does with the state at an instant.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from krabka.format.records import Lease
from krabka.format.token import FencingToken

__all__ = ["OutOfOrder", "Record", "RoleState", "RosterEntry"]


@dataclass(frozen=True, slots=True)
class Record:
    """One record of the state topic as a reader sees it.

    `value` is None for a tombstone; readers treat an empty value alike.
    `timestamp` is the record's Kafka timestamp in epoch milliseconds.
    """

    offset: int
    key: bytes
    value: bytes | None
    timestamp: int


@dataclass(frozen=True, slots=True)
class RosterEntry:
    """A registered member: its rank comes from `offset`."""

    member: str
    offset: int
    registered_at: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class OutOfOrder:
    """A tenure that began before its winner's slot under the reader's placement.

    Members following one policy and one stagger never do that, so it says
    the role's members mix placement policies (or staggers): `placement` is
    the reader's, `slot` the winner's earliest challenge instant under it,
    `granted_at` the instant the winner's first lease was granted.
    """

    offset: int
    member: str
    granted_at: int
    slot: int
    placement: str


@dataclass(slots=True)
class RoleState:
    """Everything the log says about one role.

    `roster` lists members in the offset order of their latest registration;
    `lease` is the latest lease record (live or lapsed), None when the role is
    vacant or was never leased; `tenure` is the offset of the earliest retained
    lease record carrying the current lease's token; `errors` has one
    ``(offset, reason)`` per record skipped as malformed (or the latest ones,
    for a fold told to keep only so many: `skipped` counts them all).
    """

    role: str
    entries: list[RosterEntry] = field(default_factory=list)
    lease: Lease | None = None
    tenure: int | None = None
    errors: list[tuple[int, str]] = field(default_factory=list)
    skipped: int = 0
    """Every record skipped as malformed."""
    cleared: Lease | None = None
    """In a vacancy: the lease the tombstone cleared, if one was retained."""
    vacant_since: int | None = None
    """In a vacancy: the Kafka timestamp of the first lease tombstone after the
    last lease record."""
    lease_offset: int | None = None
    """The offset of the latest record under the lease key (value or tombstone)."""
    lease_timestamp: int | None = None
    """The Kafka timestamp of the record at `lease_offset`."""
    tenures: dict[FencingToken, int] = field(default_factory=dict)
    """Each token of a lease record and the offset of its first one, first seen
    first: where `tenure` is looked up when a token comes back."""
    misplaced: int = 0
    """Records of the partition whose role hashes elsewhere (set by readers
    that know the partition)."""
    out_of_order: int = 0
    """Tenures that began out of order under the reader's placement (set by a
    fold told the placement): the role's members mix policies."""
    last_out_of_order: OutOfOrder | None = None
    """The latest of them."""

    @property
    def roster(self) -> list[str]:
        """Registered members, first registered first."""
        return [entry.member for entry in self.entries]

    @property
    def token(self) -> FencingToken | None:
        """The token of the latest lease, or None without one."""
        if self.lease is None:
            return None
        return FencingToken(self.lease.producer_id, self.lease.producer_epoch)

    @property
    def holder(self) -> str | None:
        """The member of the latest lease record, live or lapsed."""
        return None if self.lease is None else self.lease.member

    @property
    def cleared_member(self) -> str | None:
        """In a vacancy: the member of the lease the tombstone cleared, if retained."""
        return None if self.cleared is None else self.cleared.member

    def rank_of(self, member: str) -> tuple[int, bool]:
        """`member`'s position in the roster and True, or ``(-1, False)``."""
        for rank, entry in enumerate(self.entries):
            if entry.member == member:
                return rank, True
        return -1, False

    def entry_of(self, member: str) -> RosterEntry | None:
        """`member`'s latest registration, if it is registered."""
        rank, ranked = self.rank_of(member)
        return self.entries[rank] if ranked else None

    def copy(self) -> RoleState:
        """A copy that later folding of this state does not change."""
        return replace(self, entries=list(self.entries), errors=list(self.errors),
                       tenures=dict(self.tenures))

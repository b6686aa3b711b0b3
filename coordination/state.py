"""A role's state, folded from its partition of ``__coordination_state``.

The log is the referee: rank is the offset of a member's latest registration,
the holder is the member of the latest lease record. Nothing here reads a
clock; `evaluate` decides what a member does with the state at an instant.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from coordination.errors import FormatError
from coordination.records import Kind, Lease, decode_key, decode_lease, decode_registration
from coordination.token import FencingToken

__all__ = ["Record", "RoleFold", "RoleState", "RosterEntry", "build_role_state"]


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


@dataclass(slots=True)
class RoleState:
    """Everything the log says about one role.

    `roster` lists members in the offset order of their latest registration;
    `lease` is the latest lease record (live or lapsed), None when the role is
    vacant or was never leased; `tenure` is the offset of the earliest retained
    lease record carrying the current lease's token; `errors` has one
    ``(offset, reason)`` per record skipped as malformed.
    """

    role: str
    entries: list[RosterEntry] = field(default_factory=list)
    lease: Lease | None = None
    tenure: int | None = None
    errors: list[tuple[int, str]] = field(default_factory=list)
    cleared_member: str | None = None
    """In a vacancy: the member of the lease the tombstone cleared, if retained."""
    vacant_since: int | None = None
    """In a vacancy: the Kafka timestamp of the first lease tombstone after the
    last lease record."""
    lease_offset: int | None = None
    """The offset of the latest record under the lease key (value or tombstone)."""
    misplaced: int = 0
    """Records of the partition whose role hashes elsewhere (set by readers
    that know the partition)."""

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


def build_role_state(role: str, records: Iterable[Record]) -> RoleState:
    """Fold `records` (one partition, in offset order) into `role`'s state.

    Records of other roles are ignored. A record that does not decode, or a
    registration whose value names another member than its key, changes
    nothing and is listed in `RoleState.errors`; an undecodable key cannot be
    attributed to a role, so every role built from the partition lists it.
    """
    fold = RoleFold(role)
    for record in records:
        fold.apply(record)
    return fold.state


class RoleFold:
    """`build_role_state` one record at a time, for a reader that keeps up
    with a partition: each record costs O(roster), whatever the log's length.
    """

    def __init__(self, role: str) -> None:
        self.state = RoleState(role)
        self._tenures: dict[FencingToken, int] = {}

    def apply(self, record: Record) -> None:
        """Fold the next record of the partition (offsets must increase)."""
        state = self.state
        try:
            key = decode_key(record.key)
        except FormatError as exc:
            state.errors.append((record.offset, str(exc)))
            return
        if key.role != state.role:
            return
        try:
            if key.kind == Kind.REGISTRATION:
                _fold_registration(state, record, key.member)
            else:
                _fold_lease(state, record, self._tenures)
        except FormatError as exc:
            state.errors.append((record.offset, str(exc)))

    def snapshot(self) -> RoleState:
        """A copy of the state so far, unaffected by later records."""
        return replace(self.state, entries=list(self.state.entries),
                       errors=list(self.state.errors))


def _fold_registration(state: RoleState, record: Record, member: str) -> None:
    entry = None
    if record.value:
        registration = decode_registration(record.value)
        if registration.member != member:
            raise FormatError(
                "registration value",
                f"names member {registration.member!r} under the key of {member!r}",
            )
        entry = RosterEntry(member, record.offset, registration.registered_at, record.timestamp)
    state.entries = [kept for kept in state.entries if kept.member != member]
    if entry is not None:
        state.entries.append(entry)


def _fold_lease(state: RoleState, record: Record, tenures: dict[FencingToken, int]) -> None:
    if not record.value:
        state.lease_offset = record.offset
        if state.lease is not None:
            state.cleared_member = state.lease.member
            state.vacant_since = record.timestamp
            state.lease = None
            state.tenure = None
        elif state.vacant_since is None:
            state.vacant_since = record.timestamp
        return
    lease = decode_lease(record.value)
    state.lease_offset = record.offset
    token = FencingToken(lease.producer_id, lease.producer_epoch)
    state.lease = lease
    state.tenure = tenures.setdefault(token, record.offset)
    state.cleared_member = None
    state.vacant_since = None


"""The fold: the rules that turn a role's records into its `RoleState`.

`build_role_state` folds a whole partition; `RoleFold` folds it one record at
a time and reports what each record changed (`krabka.rules.changes`), for a
reader that keeps up with a partition (a standby, the worker's table) and
must not keep the log.
"""

from __future__ import annotations

from collections.abc import Iterable

from krabka import defaults
from krabka.errors import FormatError
from krabka.format.records import Key, Kind, Lease, decode_key, decode_lease, decode_registration
from krabka.format.token import FencingToken
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
from krabka.rules.evaluate import Placement, out_of_order_slot
from krabka.rules.state import OutOfOrder, Record, RoleState, RosterEntry

__all__ = ["RoleFold", "build_role_state"]


def build_role_state(
    role: str, records: Iterable[Record], *, placement: Placement | None = None,
    challenge_stagger: float = defaults.CHALLENGE_STAGGER,
) -> RoleState:
    """Fold `records` (one partition, in offset order) into `role`'s state.

    Records of other roles are ignored. A record that does not decode, or a
    registration whose value names another member than its key, changes
    nothing and is listed in `RoleState.errors`; an undecodable key cannot be
    attributed to a role, so every role built from the partition lists it.
    `placement` and `challenge_stagger` are `RoleFold`'s.
    """
    fold = RoleFold(role, placement=placement, challenge_stagger=challenge_stagger)
    for record in records:
        fold.apply(record)
    return fold.state


class RoleFold:
    """`build_role_state` one record at a time: each record costs O(roster),
    whatever the log's length.

    A fold that must stay small can bound what it remembers: `keep_tokens`
    tokens for the tenure rule (the oldest first seen is forgotten; only a
    token that comes back after that many others gets a later tenure than
    `build_role_state` gives it, and a coordinator never hands a token out
    twice) and `keep_errors` of the latest errors (`skipped` still counts
    all). `state` resumes a fold from a state it produced; the fold takes it
    over and changes it in place.

    A fold told the reader's `placement` (and `challenge_stagger`) also
    checks each new tenure against them and counts in
    `RoleState.out_of_order` those that began before their winner's slot
    (`krabka.rules.evaluate.out_of_order_slot`): the sign of members that
    mix placement policies.
    """

    def __init__(self, role: str, *, keep_tokens: int | None = None,
                 keep_errors: int | None = None, state: RoleState | None = None,
                 placement: Placement | None = None,
                 challenge_stagger: float = defaults.CHALLENGE_STAGGER) -> None:
        for name, bound in (("keep_tokens", keep_tokens), ("keep_errors", keep_errors)):
            if bound is not None and bound < 1:
                raise ValueError(f"{name} must be at least 1, got {bound}")
        if state is not None and state.role != role:
            raise ValueError(f"a fold of role {role!r} cannot resume the state of {state.role!r}")
        self.state = RoleState(role) if state is None else state
        self._keep_tokens = keep_tokens
        self._keep_errors = keep_errors
        self._placement = placement
        self._challenge_stagger = challenge_stagger

    def apply(self, record: Record) -> Change | None:
        """Fold the next record of the partition (offsets must increase).

        Returns what the record changed, or None for a record of another role
        or one that changed nothing (a registration tombstone of a member
        that is not registered).
        """
        try:
            key = decode_key(record.key)
        except FormatError as exc:
            return self._skip(record, exc)
        return self.apply_key(record, key)

    def apply_key(self, record: Record, key: Key) -> Change | None:
        """`apply` for a record whose key the caller has decoded: `key` must be
        ``decode_key(record.key)`` (a reader that routes records by role decodes
        each key once)."""
        if key.role != self.state.role:
            return None
        try:
            if key.kind == Kind.REGISTRATION:
                return self._registration(record, key.member)
            return self._lease(record)
        except FormatError as exc:
            return self._skip(record, exc)

    def snapshot(self) -> RoleState:
        """A copy of the state so far, unaffected by later records."""
        return self.state.copy()

    def _skip(self, record: Record, exc: FormatError) -> Skipped:
        state = self.state
        state.errors.append((record.offset, str(exc)))
        state.skipped += 1
        if self._keep_errors is not None:
            del state.errors[:-self._keep_errors]
        return Skipped(record.offset, record.timestamp, str(exc))

    def _registration(self, record: Record, member: str) -> Joined | Left | None:
        state = self.state
        rank, ranked = state.rank_of(member)
        if not record.value:
            if not ranked:
                return None
            del state.entries[rank]
            return Left(record.offset, record.timestamp, member, rank)
        registration = decode_registration(record.value)
        if registration.member != member:
            raise FormatError(
                "registration value",
                f"names member {registration.member!r} under the key of {member!r}",
            )
        entry = RosterEntry(member, record.offset, registration.registered_at, record.timestamp)
        if ranked:
            del state.entries[rank]
        state.entries.append(entry)
        return Joined(record.offset, record.timestamp, entry, len(state.entries) - 1,
                      rank if ranked else None)

    def _lease(self, record: Record) -> Elected | Renewed | Resigned | StillVacant:
        state = self.state
        prior = state.lease
        if not record.value:
            state.lease_offset = record.offset
            state.lease_timestamp = record.timestamp
            if prior is None:
                if state.vacant_since is None:
                    state.vacant_since = record.timestamp
                return StillVacant(record.offset, record.timestamp)
            tenure = state.tenure
            assert tenure is not None, "a lease always has a tenure"
            state.cleared = prior
            state.vacant_since = record.timestamp
            state.lease = None
            state.tenure = None
            return Resigned(record.offset, record.timestamp, prior, tenure)
        lease = decode_lease(record.value)
        previous = prior if prior is not None else state.cleared
        renewal = prior is not None and (prior.member, prior.producer_id,
                                         prior.producer_epoch) == (
            lease.member, lease.producer_id, lease.producer_epoch)
        if not renewal and self._placement is not None:
            self._check_order(record, lease, self._placement)
        tenure = self._tenure_of(FencingToken(lease.producer_id, lease.producer_epoch),
                                 record.offset)
        state.lease_offset = record.offset
        state.lease_timestamp = record.timestamp
        state.lease = lease
        state.tenure = tenure
        state.cleared = None
        state.vacant_since = None
        if prior is not None and renewal:
            return Renewed(record.offset, record.timestamp, lease, prior)
        return Elected(record.offset, record.timestamp, lease, tenure, previous)

    def _check_order(self, record: Record, lease: Lease, placement: Placement) -> None:
        """Count a new tenure that began before its winner's slot (state: just before it)."""
        state = self.state
        slot = out_of_order_slot(state, lease, self._challenge_stagger, placement)
        if slot is not None:
            state.out_of_order += 1
            state.last_out_of_order = OutOfOrder(record.offset, lease.member, lease.granted_at,
                                                  slot, placement)

    def _tenure_of(self, token: FencingToken, offset: int) -> int:
        tenures = self.state.tenures
        first = tenures.get(token)
        if first is not None:
            return first
        tenures[token] = offset
        if self._keep_tokens is not None and len(tenures) > self._keep_tokens:
            del tenures[next(iter(tenures))]
        return offset

"""The fold: one state-topic record applied to a role's table value (pure).

`fold` applies a record exactly as `coordination.build_role_state` would,
with the library's decoders, and returns the leadership-change events the
record causes. `route` says which role a record belongs to, or why none can
own it (`fold_unattributed` counts those per partition). `expire` is the
tick: it reports a lapse that no record revealed. Nothing here raises for
bad bytes, reads a clock or imports Faust; the agent in `agents.fold` does
the I/O.

Lapses are judged by time: a tick's wall clock, or the Kafka timestamp of the
role's next record (the writer's clock, like every lease deadline). A lapse is
reported once per lease record, and only while that lease is the latest.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from agents.events import EventKind, LeadershipEvent
from coordination import (
    FormatError,
    Key,
    Kind,
    Record,
    RosterEntry,
    decode_key,
    decode_lease,
    decode_registration,
    role_partition,
)
from tables.partition_state import PartitionValue, SkipKind
from tables.role_state import MAX_ERRORS, MAX_TENURES, LeaseValue, RoleValue

__all__ = ["Unattributed", "expire", "fold", "fold_unattributed", "route"]


@dataclass(frozen=True, slots=True)
class Unattributed:
    """Why a record belongs to no role of its partition."""

    kind: SkipKind
    reason: str


def route(record: Record, partition: int, partitions: int) -> Key | Unattributed:
    """The record's decoded key, or why it cannot be folded into any role here."""
    try:
        key = decode_key(record.key)
    except FormatError as exc:
        return Unattributed("undecodable-key", str(exc))
    home = role_partition(key.role, partitions)
    if home != partition:
        return Unattributed(
            "misplaced",
            f"role {key.role!r} belongs to partition {home}, read from partition {partition}",
        )
    return key


def fold_unattributed(
    value: PartitionValue | None, record: Record, partition: int, why: Unattributed
) -> PartitionValue:
    """Count a record no role owns in its partition's value."""
    new = PartitionValue(partition) if value is None else replace(value)
    new.note(why.kind, record.offset, why.reason)
    return new


def fold(
    value: RoleValue | None, record: Record, partition: int, partitions: int
) -> tuple[RoleValue | None, list[LeadershipEvent]]:
    """Apply one record of `partition` to its role's value.

    `value` is the role's current value (None before its first record). A
    record that `route` rejects leaves `value` as it is (count it with
    `fold_unattributed`); a record at or below the last applied offset is a
    replay and changes nothing. A record that fails to decode is counted in
    the value and reported in its errors, and changes nothing else.
    """
    key = route(record, partition, partitions)
    if isinstance(key, Unattributed):
        return value, []
    if value is None:
        value = RoleValue(key.role, partition)
    elif value.role != key.role:
        raise ValueError(f"a record of role {key.role!r} folded into {value.role!r}")
    if record.offset <= value.last_offset:
        return value, []
    new = replace(value, roster=list(value.roster), tenures=list(value.tenures),
                  errors=list(value.errors), last_offset=record.offset)
    events = _lapse(new, record.timestamp)
    try:
        if key.kind == Kind.REGISTRATION:
            events += _registration(new, record, key.member)
        else:
            events += _lease(new, record)
    except FormatError as exc:
        new.skipped += 1
        new.errors = [*new.errors, (record.offset, str(exc))][-MAX_ERRORS:]
    return new, events


def expire(value: RoleValue, now_ms: int) -> tuple[RoleValue, list[LeadershipEvent]]:
    """Report the lapse of the latest lease if its deadline is past at `now_ms`."""
    new = replace(value)
    return new, _lapse(new, now_ms)


def _lapse(value: RoleValue, now_ms: int) -> list[LeadershipEvent]:
    lease = value.lease
    if lease is None or value.lapse_reported or now_ms < lease.deadline:
        return []
    value.lapse_reported = True
    return [_lease_event("lapsed", value, lease, lease.offset, lease.timestamp)]


def _registration(value: RoleValue, record: Record, member: str) -> list[LeadershipEvent]:
    old_rank = value.rank_of(member)
    if record.value:
        registration = decode_registration(record.value)
        if registration.member != member:
            # The same rule and words as coordination.state, so errors agree.
            raise FormatError(
                "registration value",
                f"names member {registration.member!r} under the key of {member!r}",
            )
        entry = RosterEntry(member, record.offset, registration.registered_at, record.timestamp)
        value.roster = [*(e for e in value.roster if e.member != member), entry]
        return [LeadershipEvent(value.role, "member-joined", member, value.partition,
                                record.offset, record.timestamp, rank=len(value.roster) - 1)]
    if old_rank is None:
        return []
    value.roster = [e for e in value.roster if e.member != member]
    return [LeadershipEvent(value.role, "member-left", member, value.partition, record.offset,
                            record.timestamp, rank=old_rank)]


def _lease(value: RoleValue, record: Record) -> list[LeadershipEvent]:
    if not record.value:
        return _lease_tombstone(value, record)
    lease = decode_lease(record.value)
    current = LeaseValue(lease.member, lease.producer_id, lease.producer_epoch, lease.granted_at,
                         lease.deadline, record.offset, record.timestamp)
    prior = value.lease
    value.lease_offset = record.offset
    value.lease = current
    value.tenure = _tenure_of(value, current)
    value.vacant_since = None
    value.lapse_reported = False
    previous = value.last_lease
    value.last_lease = current
    if prior is not None and prior.token == current.token and prior.member == current.member:
        return []  # a renewal is not an event
    return [_lease_event("elected", value, current, record.offset, record.timestamp,
                         previous=previous)]


def _lease_tombstone(value: RoleValue, record: Record) -> list[LeadershipEvent]:
    value.lease_offset = record.offset
    prior = value.lease
    if prior is None:
        if value.vacant_since is None:
            value.vacant_since = record.timestamp
        return []
    event = _lease_event("resigned", value, prior, record.offset, record.timestamp)
    value.lease = None
    value.tenure = None
    value.vacant_since = record.timestamp
    return [event]


def _tenure_of(value: RoleValue, lease: LeaseValue) -> int:
    """The offset of the first lease record of `lease`'s token (build_role_state's rule)."""
    for producer_id, producer_epoch, offset in value.tenures:
        if (producer_id, producer_epoch) == (lease.producer_id, lease.producer_epoch):
            return offset
    value.tenures = [*value.tenures, (lease.producer_id, lease.producer_epoch, lease.offset)]
    value.tenures = value.tenures[-MAX_TENURES:]
    return lease.offset


def _lease_event(
    kind: EventKind,
    value: RoleValue,
    lease: LeaseValue,
    offset: int,
    timestamp: int,
    previous: LeaseValue | None = None,
) -> LeadershipEvent:
    return LeadershipEvent(
        value.role,
        kind,
        lease.member,
        value.partition,
        offset,
        timestamp,
        token=lease.token,
        tenure=value.tenure,
        granted_at=lease.granted_at,
        deadline=lease.deadline,
        previous_holder=None if previous is None else previous.member,
        previous_token=None if previous is None else previous.token,
        rank=value.rank_of(lease.member),
    )

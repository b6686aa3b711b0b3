"""The fold: one state-topic record applied to a role's table value (pure).

`fold` hands the record to the library's `coordination.RoleFold`, which owns
every rule of the role's state, and turns the change it reports into the
leadership-change events of docs/events.md (`coordination.events`, which the
operator CLI's ``watch`` uses too). `route` says which role a record
belongs to, or why none can own it (`fold_unattributed` counts those per
partition). `expire` is the tick: it reports a lapse that no record
revealed. Nothing here raises for bad bytes, reads a clock or imports Faust;
the agent in `agents.fold` does the I/O.

Lapses are judged by time: a tick's wall clock, or the Kafka timestamp of the
role's next record (the writer's clock, like every lease deadline). A lapse is
reported once per lease record, and only while that lease is the latest.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from agents.events import LeadershipEvent
from coordination import (
    Elected,
    FormatError,
    Key,
    Placement,
    Record,
    Renewed,
    RoleFold,
    RoleState,
    decode_key,
    defaults,
    role_partition,
)
from coordination.events import change_event, lease_event
from tables.partition_state import PartitionValue, SkipKind
from tables.role_state import MAX_ERRORS, MAX_TENURES, RoleValue

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
    value: RoleValue | None, record: Record, partition: int, partitions: int, *,
    placement: Placement | None = None, challenge_stagger: float = defaults.CHALLENGE_STAGGER,
) -> tuple[RoleValue | None, list[LeadershipEvent]]:
    """Apply one record of `partition` to its role's value.

    Given the worker's `placement` and `challenge_stagger`, each new tenure
    is also checked against them (`RoleState.out_of_order`).

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
        value = RoleValue(RoleState(key.role), partition)
    elif value.state.role != key.role:
        raise ValueError(f"a record of role {key.role!r} folded into {value.state.role!r}")
    if record.offset <= value.last_offset:
        return value, []
    new = replace(value, state=value.state.copy(), last_offset=record.offset)
    events = _lapse(new, record.timestamp)
    change = RoleFold(key.role, state=new.state, keep_tokens=MAX_TENURES,
                      keep_errors=MAX_ERRORS, placement=placement,
                      challenge_stagger=challenge_stagger).apply(record)
    if isinstance(change, Elected | Renewed):
        new.lapse_reported = False  # a new lease record can lapse in its turn
    event = change_event(new.state, new.partition, change)
    return new, events if event is None else [*events, event]


def expire(value: RoleValue, now_ms: int) -> tuple[RoleValue, list[LeadershipEvent]]:
    """Report the lapse of the latest lease if its deadline is past at `now_ms`."""
    new = replace(value)
    return new, _lapse(new, now_ms)


def _lapse(value: RoleValue, now_ms: int) -> list[LeadershipEvent]:
    state = value.state
    lease = state.lease
    if lease is None or value.lapse_reported or now_ms < lease.deadline:
        return []
    value.lapse_reported = True
    # A lease's record is the latest under the lease key: its offset and timestamp.
    assert state.lease_offset is not None
    assert state.lease_timestamp is not None
    return [lease_event("lapsed", state, value.partition, lease, state.tenure,
                        state.lease_offset, state.lease_timestamp)]

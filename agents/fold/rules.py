"""The fold: one state-topic record applied to a role's table value (pure).

`fold` hands the record to the library's `krabka.rules.fold.RoleFold`, which owns
every rule of the role's state, and turns the change it reports into the
leadership-change events of docs/events.md (`krabka.observe.events`, which the
operator CLI's ``watch`` uses too). `route` says which role a record
belongs to, or why none can own it (`fold_unattributed` counts those per
partition). `expire` is the tick: it reports a lapse that no record
revealed. Nothing here raises for bad bytes, reads a clock or imports Faust;
the agent in `agents.fold.agent` does the I/O.

Lapses are judged by time: a tick's wall clock, or the Kafka timestamp of the
role's next record (the writer's clock, like every lease deadline). A lapse is
reported once per lease record, and only while that lease is the latest.

In term mode `fold_terms` applies a ``__coordination_terms`` record to the
role's `TermView` with the library's `krabka.term.fold.TermFold` (the rule the
candidates elect by) and `krabka.observe.events.term_change_event` names the events;
`expire_term` reports a holder silent for the election timeout, once per
sign of life, located at that sign.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

from agents.events import LeadershipEvent
from agents.fold.partition_value import PartitionValue, SkipKind
from agents.fold.role_value import MAX_ERRORS, MAX_TENURES, RoleValue
from krabka import FormatError, defaults
from krabka.format.partition import role_partition
from krabka.format.records import Key, decode_key
from krabka.format.terms import TermKey, decode_term_key
from krabka.observe.events import change_event, lease_event, term_change_event, term_lapse
from krabka.rules.changes import Elected, Renewed
from krabka.rules.evaluate import Placement
from krabka.rules.fold import RoleFold
from krabka.rules.state import Record, RoleState
from krabka.term.fold import TermFold, TermView

__all__ = ["Unattributed", "due_at", "expire", "expire_term", "fold", "fold_terms",
           "fold_unattributed", "role_fold", "route", "route_term", "step"]



class _RoleKey(Protocol):
    @property
    def role(self) -> str: ...


_K = TypeVar("_K", bound=_RoleKey)


@dataclass(frozen=True, slots=True)
class Unattributed:
    """Why a record belongs to no role of its partition."""

    kind: SkipKind
    reason: str


def route(record: Record, partition: int, partitions: int) -> Key | Unattributed:
    """The record's decoded key, or why it cannot be folded into any role here."""
    return _routed(record, partition, partitions, decode_key, "partition")


def route_term(record: Record, partition: int, partitions: int) -> TermKey | Unattributed:
    """The terms record's decoded key, or why no role of `partition` owns it."""
    return _routed(record, partition, partitions, decode_term_key, "terms partition")


def _routed(record: Record, partition: int, partitions: int,
            decode: Callable[[bytes], _K], read_from: str) -> _K | Unattributed:
    """`record`'s key decoded by `decode`, if its role's home is `partition`."""
    try:
        key = decode(record.key)
    except FormatError as exc:
        return Unattributed("undecodable-key", str(exc))
    home = role_partition(key.role, partitions)
    if home != partition:
        return Unattributed(
            "misplaced",
            f"role {key.role!r} belongs to partition {home}, read from {read_from} {partition}",
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
    new = replace(value, state=value.state.copy())
    return new, step(new, role_fold(new, placement, challenge_stagger), key, record)


def role_fold(value: RoleValue, placement: Placement | None,
              challenge_stagger: float) -> RoleFold:
    """The library's fold of `value`'s role, taking over `value.state` (changed in place
    by each `step`), with the value's bounds and the reader's placement."""
    return RoleFold(value.state.role, state=value.state, keep_tokens=MAX_TENURES,
                    keep_errors=MAX_ERRORS, placement=placement,
                    challenge_stagger=challenge_stagger)


def step(value: RoleValue, folder: RoleFold, key: Key, record: Record) -> list[LeadershipEvent]:
    """Apply `record` to `value` in place; its events.

    The one rule of a record's effect on a role's value, shared by `fold` (on
    a copy) and the chunked fold (`agents.fold.chunk`, on a value it owns for
    the chunk). `folder` is `role_fold(value, ...)` (it changes
    ``value.state``), `key` is the record's routed key, and `record` is past
    ``value.last_offset`` (not a replay).
    """
    value.last_offset = record.offset
    events = _lapse(value, record.timestamp)
    change = folder.apply_key(record, key)
    if isinstance(change, Elected | Renewed):
        value.lapse_reported = False  # a new lease record can lapse in its turn
    event = change_event(value.state, value.partition, change)
    if event is not None:
        events.append(event)
    return events


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


def due_at(value: RoleValue, timeout_ms: int) -> int | None:
    """The earliest time (ms) at which `expire` or `expire_term` may report a lapse of
    `value`, None if neither can until the value changes.

    Both checks read the time only as ``now >= due``, so a check made at or
    after this time finds what any later check of the same value would find.
    `timeout_ms` is `expire_term`'s.
    """
    dues = []
    lease = value.state.lease
    if lease is not None and not value.lapse_reported:
        dues.append(lease.deadline)
    if (value.terms is not None and not value.term_lapse_reported
            and value.sign_timestamp is not None):
        dues.append(value.sign_timestamp + timeout_ms)
    return min(dues, default=None)


def fold_terms(
    value: RoleValue | None, record: Record, partition: int, partitions: int, timeout_ms: int,
) -> tuple[RoleValue | None, list[LeadershipEvent]]:
    """Apply one record of the terms topic's `partition` to its role's value.

    `timeout_ms` is the election timeout (the worker's lease duration in term
    mode): a holder silent that long before this record's timestamp is
    reported ``lapsed`` first. A record `route_term` rejects leaves `value`
    as it is; one at or below the last terms offset applied is a replay and
    changes nothing.
    """
    key = route_term(record, partition, partitions)
    if isinstance(key, Unattributed):
        return value, []
    if value is None:
        value = RoleValue(RoleState(key.role), partition)
    elif value.state.role != key.role:
        raise ValueError(f"a terms record of role {key.role!r} folded into "
                         f"{value.state.role!r}")
    if record.offset <= value.terms_offset:
        return value, []
    view = (TermView(key.role) if value.terms is None else
            replace(value.terms, winners=dict(value.terms.winners),
                    claims=dict(value.terms.claims), errors=list(value.terms.errors)))
    new = replace(value, terms=view, terms_offset=record.offset)
    events = _term_lapse(new, record.timestamp, timeout_ms)
    sign = view.sign_offset
    fold = TermFold(key.role)
    fold.view = view
    change = fold.apply(record)
    if view.sign_offset != sign:
        new.sign_timestamp = record.timestamp
        new.term_lapse_reported = False  # a new sign of life can lapse in its turn
    if change is not None:
        events.append(term_change_event(key.role, partition, change,
                                        _rank(new.state, change.claim.member)))
    return new, events


def expire_term(value: RoleValue, now_ms: int, timeout_ms: int
                ) -> tuple[RoleValue, list[LeadershipEvent]]:
    """Report the holder's silence if `timeout_ms` passed since its last sign at `now_ms`."""
    new = replace(value)
    return new, _term_lapse(new, now_ms, timeout_ms)


def _term_lapse(value: RoleValue, now_ms: int, timeout_ms: int) -> list[LeadershipEvent]:
    since = value.sign_timestamp
    if (value.terms is None or value.term_lapse_reported or since is None
            or now_ms < since + timeout_ms):
        return []
    holder = value.terms.holder
    event = term_lapse(value.state.role, value.partition, value.terms, since, timeout_ms,
                       None if holder is None else _rank(value.state, holder))
    if event is None:
        return []
    value.term_lapse_reported = True
    return [event]


def _rank(state: RoleState, member: str) -> int | None:
    """`member`'s rank in the role's roster (on the state topic), or None if unregistered."""
    rank, ranked = state.rank_of(member)
    return rank if ranked else None

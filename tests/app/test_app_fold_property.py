"""Property: the worker's fold is the library's change stream turned into table
values and events.

Folding a partition record by record through the table codec ends with, for
every role, the `RoleState` that `build_role_state` / `describe_role_state`
compute from the whole sequence (merged with the partition's unattributable
records, as the web view shows it). Each record's events are the event of the
change `RoleFold` reports for it (none for renewals, vacant tombstones and
malformed records), after the lapse the record's timestamp reveals.
Fewer than `MAX_TENURES` distinct tokens appear (tests/support/state_logs.py).
"""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings

from agents.fold import partition_value, role_value
from agents.fold.role_value import MAX_ERRORS, RoleValue
from agents.fold.rules import Unattributed, fold, fold_unattributed, route
from app.web.role_view import merged_state
from krabka.format.partition import role_partition
from krabka.format.records import decode_key
from krabka.rules.changes import Elected, Joined, Left, Resigned
from krabka.rules.fold import RoleFold, build_role_state
from krabka.rules.state import Record
from tests.support.state_logs import partitions

PARTITIONS = 3
PARTITION = 1
CANDIDATES = [f"role-{i}" for i in range(40)]
HOME_ROLES = [r for r in CANDIDATES if role_partition(r, PARTITIONS) == PARTITION][:3]
AWAY_ROLES = [r for r in CANDIDATES if role_partition(r, PARTITIONS) != PARTITION][:1]
ROLES = HOME_ROLES + AWAY_ROLES
EVENT_OF = {Joined: "member-joined", Left: "member-left", Elected: "elected",
            Resigned: "resigned"}


def _misplaced(records: list[Record]) -> int:
    count = 0
    for record in records:
        try:
            role = decode_key(record.key).role
        except ValueError:
            continue
        count += role_partition(role, PARTITIONS) != PARTITION
    return count


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(partitions(ROLES))
def test_folding_record_by_record_ends_with_the_state_build_role_state_gives(records):
    values: dict[str, RoleValue] = {}
    skipped = None
    for record in records:
        key = route(record, PARTITION, PARTITIONS)
        if isinstance(key, Unattributed):
            skipped = fold_unattributed(skipped, record, PARTITION, key)
            skipped = partition_value.decode(partition_value.encode(skipped))
            continue
        value, _ = fold(values.get(key.role), record, PARTITION, PARTITIONS)
        assert value is not None
        values[key.role] = role_value.decode(role_value.encode(value))

    assert set(values) <= set(HOME_ROLES)
    for role, value in values.items():
        expected = build_role_state(role, records)
        assert merged_state(value, skipped) == dataclasses.replace(
            expected, errors=expected.errors[-MAX_ERRORS:], misplaced=_misplaced(records))


@settings(max_examples=300, deadline=None)
@given(partitions(ROLES))
def test_each_record_s_events_are_its_lapse_and_its_change(records):
    values: dict[str, RoleValue] = {}
    library: dict[str, RoleFold] = {}
    lapsed: set[tuple[str, int]] = set()
    for record in records:
        key = route(record, PARTITION, PARTITIONS)
        if isinstance(key, Unattributed):
            continue
        before = values.get(key.role)
        value, events = fold(before, record, PARTITION, PARTITIONS)
        assert value is not None
        values[key.role] = value
        change = library.setdefault(key.role, RoleFold(key.role)).apply(record)

        lease = None if before is None else before.state.lease
        lapses = (lease is not None and lease.deadline <= record.timestamp
                  and (key.role, before.state.lease_offset) not in lapsed)
        kinds = (["lapsed"] if lapses else []) + (
            [EVENT_OF[type(change)]] if type(change) in EVENT_OF else [])
        assert [event.kind for event in events] == kinds
        for event in events:
            assert (event.role, event.partition) == (key.role, PARTITION)
            if event.kind == "lapsed":
                assert before is not None
                lapsed.add((key.role, event.offset))
                assert event.offset == before.state.lease_offset
                assert event.timestamp == before.state.lease_timestamp
                continue
            assert (event.offset, event.timestamp) == (record.offset, record.timestamp)
            if event.kind == "elected":
                assert isinstance(change, Elected)
                assert (event.member, event.token, event.tenure) == (
                    change.lease.member, value.state.token, change.tenure)
                assert event.previous_holder == (
                    None if change.previous is None else change.previous.member)
            elif event.kind == "resigned":
                assert isinstance(change, Resigned)
                assert value.state.lease is None
                assert (event.member, event.tenure) == (change.lease.member, change.tenure)
            else:
                assert isinstance(change, Joined | Left)
                assert (event.member, event.rank) == (change.member, change.rank)

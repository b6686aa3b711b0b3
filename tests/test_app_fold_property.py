"""Property: folding a partition record by record agrees with build_role_state.

For every role of the partition, the table value after the last record (merged
with the partition's unattributable records, as the web view shows it) has
the roster, lease, tenure, vacancy, errors and misplaced count that
`build_role_state` / `describe_role_state` compute from the whole sequence.
Tokens come from a small pool, so old tokens reappear (the tenure rule that
needs the token history); fewer than `MAX_TENURES` distinct tokens appear.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.folding import Unattributed, fold, fold_unattributed, route
from coordination import (
    Lease,
    Record,
    Registration,
    build_role_state,
    encode_key,
    encode_lease,
    encode_registration,
    lease_key,
    registration_key,
    role_partition,
)
from coordination.records import decode_key
from tables import partition_state, role_state
from tables.role_state import MAX_ERRORS, RoleValue
from tables.role_view import merged_state

PARTITIONS = 3
PARTITION = 1
CANDIDATES = [f"role-{i}" for i in range(40)]
HOME_ROLES = [r for r in CANDIDATES if role_partition(r, PARTITIONS) == PARTITION][:3]
AWAY_ROLES = [r for r in CANDIDATES if role_partition(r, PARTITIONS) != PARTITION][:1]
ROLES = HOME_ROLES + AWAY_ROLES
MEMBERS = ["a", "b", "c"]
TOKENS = [(1000, 0), (1000, 1), (1000, 2), (7, 0)]

roles = st.sampled_from(ROLES)
members = st.sampled_from(MEMBERS)
times = st.integers(0, 100_000)

registration = st.builds(
    lambda role, member, named, at: (encode_key(registration_key(role, member)),
                                     encode_registration(Registration(named, at))),
    roles, members, members, times,
)
deregistration = st.builds(
    lambda role, member, empty: (encode_key(registration_key(role, member)),
                                 b"" if empty else None),
    roles, members, st.booleans(),
)
lease = st.builds(
    lambda role, member, token, granted, length: (
        encode_key(lease_key(role)),
        encode_lease(Lease(member, token[0], token[1], granted, granted + length)),
    ),
    roles, members, st.sampled_from(TOKENS), times, st.integers(0, 50_000),
)
clear = st.builds(lambda role, empty: (encode_key(lease_key(role)), b"" if empty else None),
                  roles, st.booleans())
bad_value = st.builds(lambda key, value: (key, value),
                      st.one_of(roles.map(lambda r: encode_key(lease_key(r))),
                                st.builds(lambda r, m: encode_key(registration_key(r, m)),
                                          roles, members)),
                      st.binary(min_size=1, max_size=12))
bad_key = st.builds(lambda key, value: (key, value), st.binary(max_size=12),
                    st.one_of(st.none(), st.binary(max_size=8)))
entries = st.lists(
    st.tuples(
        st.one_of(registration, registration, deregistration, lease, lease, clear, bad_value,
                  bad_key),
        st.integers(1, 3),  # offset gap: control markers and compaction leave holes
        times,              # the record's Kafka timestamp
    ),
    max_size=60,
)


def _records(drawn: list[tuple[tuple[bytes, bytes | None], int, int]]) -> list[Record]:
    records, offset = [], 0
    for (key, value), gap, timestamp in drawn:
        records.append(Record(offset, key, value, timestamp))
        offset += gap
    return records


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
@given(entries)
def test_folding_record_by_record_agrees_with_build_role_state(drawn):
    records = _records(drawn)
    values: dict[str, RoleValue] = {}
    skipped = None
    for record in records:
        key = route(record, PARTITION, PARTITIONS)
        if isinstance(key, Unattributed):
            skipped = fold_unattributed(skipped, record, PARTITION, key)
            skipped = partition_state.decode(partition_state.encode(skipped))
            continue
        value, _ = fold(values.get(key.role), record, PARTITION, PARTITIONS)
        assert value is not None
        values[key.role] = role_state.decode(role_state.encode(value))

    assert set(values) <= set(HOME_ROLES)
    for role, value in values.items():
        expected = build_role_state(role, records)
        got = merged_state(value, skipped)
        assert got.entries == expected.entries
        assert got.lease == expected.lease
        assert got.tenure == expected.tenure
        assert got.cleared_member == expected.cleared_member
        assert got.vacant_since == expected.vacant_since
        assert got.lease_offset == expected.lease_offset
        assert got.errors == expected.errors[-MAX_ERRORS:]
        undecodable = 0 if skipped is None else skipped.undecodable
        assert value.skipped + undecodable == len(expected.errors)
        assert got.misplaced == _misplaced(records)


@settings(max_examples=200, deadline=None)
@given(entries)
def test_events_follow_the_holder(drawn):
    """Every elected event names the new holder and token; resigned empties the role;
    a lease record lapses at most once."""
    values: dict[str, RoleValue] = {}
    lapsed: set[tuple[str, int]] = set()
    for record in _records(drawn):
        key = route(record, PARTITION, PARTITIONS)
        if isinstance(key, Unattributed):
            continue
        before = values.get(key.role)
        value, events = fold(before, record, PARTITION, PARTITIONS)
        assert value is not None
        values[key.role] = value
        for event in events:
            assert event.role == key.role
            assert event.partition == PARTITION
            if event.kind == "elected":
                assert value.lease is not None
                assert (event.member, event.token) == (value.lease.member, value.lease.token)
                assert event.offset == record.offset
            elif event.kind == "resigned":
                assert value.lease is None
                assert before is not None
                assert before.lease is not None
            elif event.kind == "lapsed":
                assert (key.role, event.offset) not in lapsed
                lapsed.add((key.role, event.offset))
                assert event.deadline is not None
                assert event.deadline <= record.timestamp

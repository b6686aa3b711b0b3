"""Hypothesis strategies for partitions of ``__coordination_state``: valid
registrations, deregistrations, leases and lease tombstones of a few roles,
mixed with malformed values and undecodable keys.

Tokens come from a small pool, so old tokens come back (the tenure rule that
needs the token history); offsets have gaps (control markers and compaction
leave holes); timestamps are arbitrary (the writer's clock).
"""

from __future__ import annotations

from hypothesis import strategies as st

from krabka.format.records import (
    Lease,
    Registration,
    encode_key,
    encode_lease,
    encode_registration,
    lease_key,
    registration_key,
)
from krabka.rules.state import Record

MEMBERS = ["a", "b", "c"]
TOKENS = [(1000, 0), (1000, 1), (1000, 2), (7, 0)]


def partitions(roles: list[str], max_size: int = 60) -> st.SearchStrategy[list[Record]]:
    """Record sequences of one partition holding records of `roles`."""
    role = st.sampled_from(roles)
    member = st.sampled_from(MEMBERS)
    time = st.integers(0, 100_000)
    registration = st.builds(
        lambda r, m, named, at: (encode_key(registration_key(r, m)),
                                 encode_registration(Registration(named, at))),
        role, member, member, time,
    )
    deregistration = st.builds(
        lambda r, m, empty: (encode_key(registration_key(r, m)), b"" if empty else None),
        role, member, st.booleans(),
    )
    lease = st.builds(
        lambda r, m, token, granted, length: (
            encode_key(lease_key(r)),
            encode_lease(Lease(m, token[0], token[1], granted, granted + length)),
        ),
        role, member, st.sampled_from(TOKENS), time, st.integers(0, 50_000),
    )
    clear = st.builds(lambda r, empty: (encode_key(lease_key(r)), b"" if empty else None),
                      role, st.booleans())
    bad_value = st.builds(
        lambda key, value: (key, value),
        st.one_of(role.map(lambda r: encode_key(lease_key(r))),
                  st.builds(lambda r, m: encode_key(registration_key(r, m)), role, member)),
        st.binary(min_size=1, max_size=12),
    )
    bad_key = st.builds(lambda key, value: (key, value), st.binary(max_size=12),
                        st.one_of(st.none(), st.binary(max_size=8)))
    entries = st.lists(
        st.tuples(
            st.one_of(registration, registration, deregistration, lease, lease, clear,
                      bad_value, bad_key),
            st.integers(1, 3),  # the gap to the next offset
            time,               # the record's Kafka timestamp
        ),
        max_size=max_size,
    )
    return entries.map(_records)


def _records(drawn: list[tuple[tuple[bytes, bytes | None], int, int]]) -> list[Record]:
    records, offset = [], 0
    for (key, value), gap, timestamp in drawn:
        records.append(Record(offset, key, value, timestamp))
        offset += gap
    return records

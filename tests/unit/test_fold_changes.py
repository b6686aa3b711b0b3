"""RoleFold's change stream: each record's reported change is exactly the
difference it made to the role's state, and folding record by record ends
where build_role_state ends."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from krabka import FencingToken
from krabka.rules.changes import Elected, Joined, Left, Renewed, Resigned, Skipped, StillVacant
from krabka.rules.fold import RoleFold, build_role_state
from krabka.rules.state import Record, RoleState
from tests.support.logs import Log
from tests.support.state_logs import partitions

ROLES = ["r", "s"]
T1 = FencingToken(1000, 0)
T2 = FencingToken(1000, 1)
T3 = FencingToken(1000, 2)

LEASE_FIELDS = {"lease", "tenure", "cleared", "vacant_since", "lease_offset", "lease_timestamp",
                "tenures"}


def differing(before: RoleState, after: RoleState) -> set[str]:
    """The names of the state fields a record changed."""
    return {f.name for f in dataclasses.fields(RoleState)
            if getattr(before, f.name) != getattr(after, f.name)}


def same_holding(one, other) -> bool:
    return (one.member, one.producer_id, one.producer_epoch) == (
        other.member, other.producer_id, other.producer_epoch)


def check_change(before: RoleState, record: Record, change, after: RoleState) -> None:
    """`change` is what `record` did to `before`, and nothing else changed."""
    changed = differing(before, after)
    if change is None:
        assert changed == set()
        return
    assert (change.offset, change.timestamp) == (record.offset, record.timestamp)
    match change:
        case Joined():
            assert changed == {"entries"}
            assert after.entries == [*(e for e in before.entries if e.member != change.member),
                                     change.entry]
            assert change.entry.offset == record.offset
            assert change.rank == len(after.entries) - 1
            rank, ranked = before.rank_of(change.member)
            assert change.previous_rank == (rank if ranked else None)
        case Left():
            assert changed == {"entries"}
            assert before.entries[change.rank].member == change.member
            assert after.entries == before.entries[:change.rank] + before.entries[change.rank + 1:]
        case Elected():
            assert changed <= LEASE_FIELDS
            assert before.lease is None or not same_holding(before.lease, change.lease)
            assert change.previous == (before.lease or before.cleared)
            assert (after.lease, after.tenure) == (change.lease, change.tenure)
            assert (after.lease_offset, after.cleared, after.vacant_since) == (
                record.offset, None, None)
        case Renewed():
            assert changed <= {"lease", "lease_offset", "lease_timestamp"}
            assert before.lease == change.previous
            assert same_holding(change.previous, change.lease)
            assert after.lease == change.lease
            assert after.lease_offset == record.offset
        case Resigned():
            assert changed <= LEASE_FIELDS - {"tenures"}
            assert (change.lease, change.tenure) == (before.lease, before.tenure)
            assert (after.lease, after.tenure, after.cleared) == (None, None, change.lease)
            assert after.vacant_since == record.timestamp
        case StillVacant():
            assert before.lease is None
            assert changed <= {"lease_offset", "lease_timestamp", "vacant_since"}
            assert after.vacant_since == (before.vacant_since if before.vacant_since is not None
                                          else record.timestamp)
        case Skipped():
            assert changed == {"errors", "skipped"}
            assert after.errors == [*before.errors, (record.offset, change.reason)]
            assert after.skipped == before.skipped + 1


@settings(max_examples=400, deadline=None)
@given(partitions(ROLES), st.sampled_from(ROLES))
def test_each_reported_change_is_exactly_what_the_record_changed(records, role):
    fold = RoleFold(role)
    for record in records:
        before = fold.snapshot()
        change = fold.apply(record)
        check_change(before, record, change, fold.state)
    assert fold.state == build_role_state(role, records)


@settings(max_examples=200, deadline=None)
@given(partitions(ROLES), st.sampled_from(ROLES), st.integers(1, 4))
def test_a_bounded_fold_forgets_only_old_errors(records, role, keep):
    """With fewer distinct tokens than it keeps, a bounded fold agrees with the
    unbounded one except that it lists only the latest errors."""
    full = build_role_state(role, records)
    fold = RoleFold(role, keep_tokens=8, keep_errors=keep)
    for record in records:
        fold.apply(record)
    assert fold.state.errors == full.errors[-keep:]
    assert fold.state.skipped == len(full.errors)
    assert dataclasses.replace(fold.state, errors=full.errors) == full


@settings(max_examples=200, deadline=None)
@given(partitions(ROLES), st.sampled_from(ROLES), st.integers(0, 60))
def test_a_fold_resumed_from_a_copy_of_its_state_goes_on_alike(records, role, cut):
    fold = RoleFold(role)
    for record in records[:cut]:
        fold.apply(record)
    resumed = RoleFold(role, state=fold.snapshot())
    for record in records[cut:]:
        assert resumed.apply(record) == fold.apply(record)
    assert resumed.state == build_role_state(role, records)


# --- examples --------------------------------------------------------------------------


def test_a_tenure_reports_elected_renewed_resigned_and_the_next_names_its_predecessor():
    log, fold = Log(), RoleFold("r")
    first = log.lease("r", "a", T1, granted_at=1, deadline=30)
    renewal = log.lease("r", "a", T1, granted_at=1, deadline=40)
    tombstone = log.clear_lease("r")
    successor = log.lease("r", "b", T2, deadline=70)
    changes = [fold.apply(record) for record in log.records]
    elected, renewed, resigned, next_elected = changes
    assert isinstance(elected, Elected)
    assert (elected.lease.member, elected.tenure, elected.previous) == ("a", first.offset, None)
    assert isinstance(renewed, Renewed)
    assert (renewed.previous.deadline, renewed.lease.deadline) == (30, 40)
    assert renewed.offset == renewal.offset
    assert isinstance(resigned, Resigned)
    assert (resigned.lease.deadline, resigned.tenure) == (40, first.offset)
    assert resigned.offset == tombstone.offset
    assert isinstance(next_elected, Elected)
    assert next_elected.previous is not None
    assert (next_elected.previous.member, next_elected.tenure) == ("a", successor.offset)


def test_the_same_token_under_another_member_is_an_election():
    log, fold = Log(), RoleFold("r")
    fold.apply(log.lease("r", "a", T1, deadline=30))
    change = fold.apply(log.lease("r", "b", T1, deadline=30))
    assert isinstance(change, Elected)
    assert change.tenure == 0


def test_a_re_registration_reports_where_the_member_was():
    log, fold = Log(), RoleFold("r")
    fold.apply(log.register("r", "a"))
    fold.apply(log.register("r", "b"))
    change = fold.apply(log.register("r", "a"))
    assert isinstance(change, Joined)
    assert (change.member, change.rank, change.previous_rank) == ("a", 1, 0)


def test_records_that_change_nothing_report_nothing():
    log, fold = Log(), RoleFold("r")
    assert fold.apply(log.register("other", "x")) is None
    assert fold.apply(log.deregister("r", "ghost")) is None


def test_a_lease_tombstone_in_a_vacancy_keeps_the_vacancy_s_start():
    log, fold = Log(), RoleFold("r")
    first = fold.apply(log.clear_lease("r", ts=5))
    second = fold.apply(log.clear_lease("r", ts=9))
    assert isinstance(first, StillVacant)
    assert isinstance(second, StillVacant)
    assert (fold.state.vacant_since, fold.state.lease_offset) == (5, 1)


def test_an_undecodable_key_is_skipped_by_every_role():
    log, fold = Log(), RoleFold("r")
    change = fold.apply(log.raw(b"\x00garbage", b""))
    assert isinstance(change, Skipped)
    assert fold.state.errors == [(0, change.reason)]


def test_a_token_back_after_more_than_the_fold_keeps_starts_a_later_tenure():
    log, fold = Log(), RoleFold("r", keep_tokens=1)
    fold.apply(log.lease("r", "a", T1, deadline=30))
    fold.apply(log.lease("r", "b", T2, deadline=30))
    back = log.lease("r", "a", T1, deadline=30)
    change = fold.apply(back)
    assert isinstance(change, Elected)
    assert change.tenure == back.offset
    assert build_role_state("r", log.records).tenure == 0
    assert list(fold.state.tenures) == [T1]
    assert fold.apply(log.lease("r", "c", T3, deadline=30)).tenure == 3


@pytest.mark.parametrize("bounds", [{"keep_tokens": 0}, {"keep_errors": 0}])
def test_a_bound_below_one_is_refused(bounds):
    with pytest.raises(ValueError, match="at least 1"):
        RoleFold("r", **bounds)


def test_a_fold_cannot_resume_another_role_s_state():
    with pytest.raises(ValueError, match="cannot resume"):
        RoleFold("r", state=RoleState("s"))

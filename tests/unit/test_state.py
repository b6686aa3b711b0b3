"""build_role_state: the roster, the holder, the tenure and the skip-and-count rules."""

from krabka import FencingToken
from krabka.format.records import (
    Registration,
    encode_key,
    encode_registration,
    lease_key,
    registration_key,
)
from krabka.rules.fold import RoleFold, build_role_state
from tests.support.logs import Log

T1 = FencingToken(1000, 0)
T2 = FencingToken(1000, 1)


def test_the_roster_is_in_registration_offset_order():
    log = Log()
    log.register("r", "b")
    log.register("r", "a")
    log.register("r", "c")
    assert build_role_state("r", log.records).roster == ["b", "a", "c"]


def test_rank_of_is_the_roster_index():
    log = Log()
    log.register("r", "b")
    log.register("r", "a")
    assert build_role_state("r", log.records).rank_of("a") == (1, True)


def test_rank_of_an_unregistered_member_is_minus_one_and_unranked():
    assert build_role_state("r", []).rank_of("nobody") == (-1, False)


def test_a_re_registration_goes_to_the_tail():
    log = Log()
    log.register("r", "a")
    log.register("r", "b")
    log.register("r", "a")
    state = build_role_state("r", log.records)
    assert state.roster == ["b", "a"]
    assert state.entry_of("a").offset == 2


def test_a_registration_tombstone_removes_the_member():
    log = Log()
    log.register("r", "a")
    log.register("r", "b")
    log.deregister("r", "a")
    assert build_role_state("r", log.records).roster == ["b"]


def test_an_empty_registration_value_is_a_tombstone():
    log = Log()
    log.register("r", "a")
    log.raw(encode_key(registration_key("r", "a")), b"")
    assert build_role_state("r", log.records).roster == []


def test_records_of_other_roles_are_ignored():
    log = Log()
    log.register("other", "x")
    log.lease("other", "x", T1, deadline=10)
    log.register("r", "a")
    state = build_role_state("r", log.records)
    assert state.roster == ["a"]
    assert state.lease is None
    assert state.errors == []


def test_a_registration_naming_another_member_is_skipped_and_counted():
    log = Log()
    log.register("r", "a")
    bad = log.raw(encode_key(registration_key("r", "a")), encode_registration(Registration("b", 0)))
    state = build_role_state("r", log.records)
    assert state.roster == ["a"]
    assert state.entry_of("a").offset == 0
    assert [offset for offset, _ in state.errors] == [bad.offset]
    assert "names member 'b'" in state.errors[0][1]


def test_a_malformed_registration_value_is_skipped_without_removing_the_member():
    log = Log()
    log.register("r", "a")
    bad = log.raw(encode_key(registration_key("r", "a")), b"\x00\x01garbage")
    state = build_role_state("r", log.records)
    assert state.roster == ["a"]
    assert state.errors == [(bad.offset, state.errors[0][1])]
    assert state.errors[0][1].startswith("malformed registration value")


def test_a_malformed_lease_value_is_skipped_and_the_previous_lease_stays():
    log = Log()
    log.register("r", "a")
    log.lease("r", "a", T1, deadline=50)
    bad = log.raw(encode_key(lease_key("r")), b"\x00\x00\x00")
    state = build_role_state("r", log.records)
    assert state.lease.deadline == 50
    assert [offset for offset, _ in state.errors] == [bad.offset]
    assert state.errors[0][1].startswith("malformed lease value")


def test_an_undecodable_key_is_counted_by_every_role_built_from_the_partition():
    log = Log()
    log.register("r", "a")
    bad = log.raw(b"\xff\xff", b"whatever")
    log.register("s", "b")
    for role in ["r", "s"]:
        state = build_role_state(role, log.records)
        assert [offset for offset, _ in state.errors] == [bad.offset]
        assert state.errors[0][1].startswith("malformed key")


def test_the_holder_is_the_member_of_the_latest_lease_record():
    log = Log()
    log.register("r", "a")
    log.register("r", "b")
    log.lease("r", "a", T1, deadline=10)
    log.lease("r", "b", T2, deadline=20)
    state = build_role_state("r", log.records)
    assert state.holder == "b"
    assert state.token == T2


def test_a_lease_tombstone_leaves_the_role_vacant_with_no_holder():
    log = Log()
    log.register("r", "a")
    log.lease("r", "a", T1, deadline=10)
    log.clear_lease("r")
    state = build_role_state("r", log.records)
    assert state.holder is None
    assert state.lease is None
    assert state.cleared_member == "a"


def test_an_empty_lease_value_is_a_tombstone():
    log = Log()
    log.lease("r", "a", T1, deadline=10)
    log.clear_lease("r", empty=True)
    assert build_role_state("r", log.records).lease is None


def test_a_vacancy_dates_from_the_first_tombstone_after_the_last_lease_record():
    log = Log()
    log.lease("r", "a", T1, deadline=10, ts=100)
    log.clear_lease("r", ts=200)
    log.clear_lease("r", ts=300)
    assert build_role_state("r", log.records).vacant_since == 200


def test_a_new_lease_after_a_vacancy_ends_it():
    log = Log()
    log.lease("r", "a", T1, deadline=10, ts=100)
    log.clear_lease("r", ts=200)
    log.lease("r", "b", T2, deadline=30, ts=300)
    state = build_role_state("r", log.records)
    assert state.holder == "b"
    assert state.vacant_since is None
    assert state.cleared_member is None


def test_the_tenure_is_the_offset_of_the_first_lease_record_of_the_current_token():
    log = Log()
    log.lease("r", "a", T1, deadline=10)
    first = log.lease("r", "b", T2, deadline=20)
    log.lease("r", "b", T2, deadline=30)
    log.lease("r", "b", T2, deadline=40)
    assert build_role_state("r", log.records).tenure == first.offset


def test_after_compaction_the_tenure_is_the_earliest_retained_record_of_the_token():
    log = Log()
    log.lease("r", "b", T2, deadline=20)
    retained = log.lease("r", "b", T2, deadline=30)
    assert build_role_state("r", log.records[1:]).tenure == retained.offset


def test_a_vacant_role_has_no_tenure():
    log = Log()
    log.lease("r", "b", T2, deadline=20)
    log.clear_lease("r")
    assert build_role_state("r", log.records).tenure is None


def test_folding_record_by_record_gives_the_state_build_role_state_gives():
    log = Log()
    log.register("r", "a")
    log.register("r", "b")
    log.lease("r", "a", T1, deadline=5)
    log.register("other", "x")
    log.raw(b"\x00garbage", b"")
    log.lease("r", "a", T1, deadline=5)
    log.clear_lease("r")
    log.lease("r", "b", T2, deadline=9)
    fold = RoleFold("r")
    for record in log.records:
        fold.apply(record)
    assert fold.state == build_role_state("r", log.records)


def test_a_snapshot_of_a_fold_does_not_change_with_later_records():
    log = Log()
    log.register("r", "a")
    fold = RoleFold("r")
    fold.apply(log.records[0])
    snapshot = fold.snapshot()
    fold.apply(log.register("r", "b"))
    fold.apply(log.raw(b"\x00garbage", b""))
    assert snapshot.roster == ["a"]
    assert snapshot.errors == []
    assert fold.state.roster == ["a", "b"]

"""The fold of the worker application: one record at a time, events per kind,
malformed and misplaced records, replays, and agreement with build_role_state."""

from __future__ import annotations

import logging
from collections.abc import Iterable

import orjson
import pytest

from agents.events import LeadershipEvent
from agents.fold import partition_value, role_value
from agents.fold.agent import _warn_out_of_order
from agents.fold.chunk import fold_chunk
from agents.fold.partition_value import PartitionValue
from agents.fold.role_value import RoleValue
from agents.fold.rules import Unattributed, expire, fold, fold_unattributed, route
from app.web.role_view import merged_state, status_of
from krabka import FencingToken
from krabka.format.partition import role_partition
from krabka.format.records import (
    Registration,
    encode_key,
    encode_registration,
    lease_key,
    registration_key,
)
from krabka.rules.fold import build_role_state
from krabka.rules.state import OutOfOrder, Record, RoleState
from tests.support.event_schema import published
from tests.support.logs import Log

PARTITIONS = 4
ROLE = "billing"
HOME = role_partition(ROLE, PARTITIONS)
ELSEWHERE = next(f"r{i}" for i in range(100) if role_partition(f"r{i}", PARTITIONS) != HOME)
T1 = FencingToken(1000, 0)
T2 = FencingToken(1000, 1)


class Folder:
    """Folds a partition's records as the agent does, through the value codecs."""

    def __init__(self, partition: int = HOME) -> None:
        self.partition = partition
        self.values: dict[str, RoleValue] = {}
        self.skipped: PartitionValue | None = None
        self.events: list[LeadershipEvent] = []

    def apply(self, records: Iterable[Record]) -> list[LeadershipEvent]:
        new_events: list[LeadershipEvent] = []
        for record in records:
            key = route(record, self.partition, PARTITIONS)
            if isinstance(key, Unattributed):
                self.skipped = fold_unattributed(self.skipped, record, self.partition, key)
                self.skipped = partition_value.decode(partition_value.encode(self.skipped))
                continue
            value, events = fold(self.values.get(key.role), record, self.partition, PARTITIONS)
            assert value is not None
            self.values[key.role] = role_value.decode(role_value.encode(value))
            new_events += events
        for event in new_events:
            published(event.encode())
        self.events += new_events
        return new_events

    def value(self, role: str = ROLE) -> RoleValue:
        return self.values[role]


def kinds(events: Iterable[LeadershipEvent]) -> list[str]:
    return [e.kind for e in events]


# --- member-joined / member-left -------------------------------------------------------


def test_a_registration_emits_member_joined_with_its_rank():
    log, folder = Log(), Folder()
    log.register(ROLE, "a")
    second = log.register(ROLE, "b", ts=5000)
    events = folder.apply(log.records)
    assert kinds(events) == ["member-joined", "member-joined"]
    joined = events[1]
    assert (joined.role, joined.member, joined.rank) == (ROLE, "b", 1)
    assert (joined.partition, joined.offset, joined.timestamp) == (HOME, second.offset, 5000)
    assert joined.token is None
    assert joined.previous_holder is None


def test_a_re_registration_joins_again_at_the_tail():
    log, folder = Log(), Folder()
    log.register(ROLE, "a")
    log.register(ROLE, "b")
    folder.apply(log.records)
    events = folder.apply([log.register(ROLE, "a")])
    assert kinds(events) == ["member-joined"]
    assert events[0].rank == 1
    assert folder.value().state.roster == ["b", "a"]


def test_a_registration_tombstone_emits_member_left_with_the_old_rank():
    log, folder = Log(), Folder()
    log.register(ROLE, "a")
    log.register(ROLE, "b")
    folder.apply(log.records)
    events = folder.apply([log.deregister(ROLE, "a")])
    assert kinds(events) == ["member-left"]
    assert (events[0].member, events[0].rank) == ("a", 0)


def test_a_tombstone_of_an_unregistered_member_is_not_an_event():
    log, folder = Log(), Folder()
    assert folder.apply([log.deregister(ROLE, "ghost")]) == []


# --- elected / renewal / resigned / lapsed ------------------------------------------------


def test_the_first_lease_emits_elected_with_every_lease_field():
    log, folder = Log(), Folder()
    log.register(ROLE, "a")
    first = log.lease(ROLE, "a", T1, granted_at=100, deadline=30_100, ts=150)
    events = folder.apply(log.records)
    elected = events[-1]
    assert elected.kind == "elected"
    assert elected.to_json() == {
        "schema": 1, "role": ROLE, "kind": "elected", "member": "a", "rank": 0,
        "token": {"producer_id": 1000, "producer_epoch": 0}, "tenure": first.offset,
        "granted_at": 100, "deadline": 30_100, "previous_holder": None, "previous_token": None,
        "partition": HOME, "offset": first.offset, "timestamp": 150,
    }


def test_a_renewal_is_not_an_event_and_keeps_the_tenure():
    log, folder = Log(), Folder()
    first = log.lease(ROLE, "a", T1, deadline=30_000, ts=0)
    folder.apply(log.records)
    assert folder.apply([log.lease(ROLE, "a", T1, deadline=40_000, ts=10_000)]) == []
    state = folder.value().state
    assert state.tenure == first.offset
    assert state.lease is not None
    assert state.lease.deadline == 40_000


def test_a_new_token_emits_elected_naming_the_previous_holder_and_token():
    log, folder = Log(), Folder()
    log.lease(ROLE, "a", T1, deadline=30_000, ts=0)
    folder.apply(log.records)
    second = log.lease(ROLE, "b", T2, deadline=60_000, ts=20_000)
    events = folder.apply([second])
    assert kinds(events) == ["elected"]
    assert (events[0].member, events[0].token, events[0].tenure) == ("b", T2, second.offset)
    assert (events[0].previous_holder, events[0].previous_token) == ("a", T1)


def test_a_lease_tombstone_emits_resigned_for_the_holder():
    log, folder = Log(), Folder()
    first = log.lease(ROLE, "a", T1, granted_at=5, deadline=30_000, ts=0)
    folder.apply(log.records)
    tombstone = log.clear_lease(ROLE, ts=1000)
    events = folder.apply([tombstone])
    assert kinds(events) == ["resigned"]
    resigned = events[0]
    assert (resigned.member, resigned.token, resigned.tenure) == ("a", T1, first.offset)
    assert (resigned.granted_at, resigned.deadline) == (5, 30_000)
    assert (resigned.offset, resigned.timestamp) == (tombstone.offset, 1000)
    assert status_of(folder.value().state, 1001) == "vacant"


def test_after_a_resignation_the_next_elected_names_the_resigned_holder():
    log, folder = Log(), Folder()
    log.lease(ROLE, "a", T1, deadline=30_000, ts=0)
    log.clear_lease(ROLE, ts=1000)
    folder.apply(log.records)
    events = folder.apply([log.lease(ROLE, "b", T2, deadline=31_000, ts=1001)])
    assert kinds(events) == ["elected"]
    assert (events[0].previous_holder, events[0].previous_token) == ("a", T1)


def test_the_next_record_after_the_deadline_reports_the_lapse_before_the_election():
    log, folder = Log(), Folder()
    lapsing = log.lease(ROLE, "a", T1, granted_at=0, deadline=30_000, ts=0)
    folder.apply(log.records)
    events = folder.apply([log.lease(ROLE, "b", T2, deadline=65_000, ts=35_000)])
    assert kinds(events) == ["lapsed", "elected"]
    lapsed = events[0]
    assert (lapsed.member, lapsed.token, lapsed.deadline) == ("a", T1, 30_000)
    # The lapse is located at the lease record that lapsed, whoever noticed it.
    assert (lapsed.offset, lapsed.timestamp) == (lapsing.offset, lapsing.timestamp)


def test_a_tick_after_the_deadline_reports_the_same_lapse_once():
    log, folder = Log(), Folder()
    lapsing = log.lease(ROLE, "a", T1, deadline=30_000, ts=0)
    folder.apply(log.records)
    value, events = expire(folder.value(), 29_999)
    assert events == []
    value, events = expire(value, 30_000)
    assert kinds(events) == ["lapsed"]
    assert events[0].offset == lapsing.offset
    value, again = expire(value, 90_000)
    assert again == []
    folder.values[ROLE] = value
    # The next record does not report it a second time.
    assert kinds(folder.apply([log.lease(ROLE, "b", T2, deadline=99_000, ts=40_000)])) == [
        "elected"
    ]


def test_status_is_computed_on_read():
    log, folder = Log(), Folder()
    log.lease(ROLE, "a", T1, deadline=30_000, ts=0)
    folder.apply(log.records)
    state = folder.value().state
    assert status_of(state, 29_999) == "held"
    assert status_of(state, 30_000) == "lapsed"
    assert status_of(RoleState(ROLE), 0) == "vacant"


# --- malformed, misplaced and replayed records ------------------------------------------


def test_a_malformed_lease_value_is_counted_and_changes_nothing():
    log, folder = Log(), Folder()
    log.lease(ROLE, "a", T1, deadline=30_000, ts=0)
    bad = log.raw(encode_key(lease_key(ROLE)), b"\x00\x00garbage", ts=1)
    events = folder.apply(log.records)
    assert kinds(events) == ["elected"]
    state = folder.value().state
    assert state.holder == "a"
    assert state.skipped == 1
    assert state.errors[-1][0] == bad.offset
    assert "malformed lease value" in state.errors[-1][1]


def test_a_registration_naming_another_member_is_skipped_with_the_library_s_reason():
    log, folder = Log(), Folder()
    log.raw(encode_key(registration_key(ROLE, "a")), encode_registration(Registration("b", 0)))
    assert folder.apply(log.records) == []
    assert folder.value().state.errors == build_role_state(ROLE, log.records).errors


def test_an_undecodable_key_is_counted_for_the_partition_and_shown_by_its_roles():
    log, folder = Log(), Folder()
    log.register(ROLE, "a")
    garbage = log.raw(b"\xde\xad\xbe\xef", b"whatever")
    folder.apply(log.records)
    assert folder.skipped is not None
    assert folder.skipped.undecodable == 1
    state = merged_state(folder.value(), folder.skipped)
    assert [offset for offset, _ in state.errors] == [garbage.offset]
    assert state.errors == build_role_state(ROLE, log.records).errors


def test_a_record_of_a_role_that_hashes_elsewhere_is_skipped_and_counted():
    log, folder = Log(), Folder()
    misplaced = log.register(ELSEWHERE, "a")
    record = misplaced
    assert isinstance(route(record, HOME, PARTITIONS), Unattributed)
    value, events = fold(None, record, HOME, PARTITIONS)
    assert (value, events) == (None, [])
    folder.apply([record])
    assert ELSEWHERE not in folder.values
    assert folder.skipped is not None
    assert folder.skipped.misplaced == 1
    assert f"belongs to partition {role_partition(ELSEWHERE, PARTITIONS)}" in (
        folder.skipped.misplaced_errors[0][1]
    )


def test_a_replayed_record_changes_nothing_and_emits_nothing():
    log, folder = Log(), Folder()
    record = log.lease(ROLE, "a", T1, deadline=30_000, ts=0)
    folder.apply([record])
    before = folder.value()
    assert folder.apply([record]) == []
    assert folder.value() == before


def test_folding_a_record_of_another_role_into_a_value_is_a_programming_error():
    log = Log()
    value, _ = fold(None, log.register(ROLE, "a"), HOME, PARTITIONS)
    other = next(f"x{i}" for i in range(100) if role_partition(f"x{i}", PARTITIONS) == HOME)
    with pytest.raises(ValueError, match="folded into"):
        fold(value, log.register(other, "a"), HOME, PARTITIONS)


def test_garbage_never_raises():
    folder = Folder()
    for offset, (key, value) in enumerate([
        (b"", b""), (b"\x00", None), (b"\x00\x00\x00\x07", b"\xff" * 40),
        (encode_key(lease_key(ROLE)), b"\x00\x00"), (encode_key(lease_key(ROLE)), b"\x00\x01"),
    ]):
        folder.apply([Record(offset, key, value, 0)])


def test_values_round_trip_through_the_codec():
    log, folder = Log(), Folder()
    log.register(ROLE, "a")
    log.lease(ROLE, "a", T1, deadline=30_000, ts=0)
    log.raw(encode_key(lease_key(ROLE)), b"bad")
    folder.apply(log.records)
    value = folder.value()
    assert role_value.decode(role_value.encode(value)) == value


def test_bytes_that_are_not_a_value_raise_value_error():
    for data in (b"", b"[]", b'{"schema": 99}', b'{"schema": 1}'):
        with pytest.raises(ValueError, match="role_state"):
            role_value.decode(data)


def test_a_tenure_begun_out_of_order_round_trips_through_the_codec():
    value = RoleValue(RoleState(ROLE, out_of_order=2, last_out_of_order=OutOfOrder(
        7, "c", 100_000, 105_000, "registration")), HOME)
    assert role_value.decode(role_value.encode(value)) == value


def test_a_value_written_before_the_placement_check_reads_as_none_seen():
    obj = orjson.loads(role_value.encode(RoleValue(RoleState(ROLE), HOME)))
    del obj["state"]["out_of_order"], obj["state"]["last_out_of_order"]
    state = role_value.decode(orjson.dumps(obj)).state
    assert (state.out_of_order, state.last_out_of_order) == (0, None)


def test_the_worker_warns_once_for_each_tenure_begun_out_of_its_placement_order(caplog):
    log = Log()
    for member in ("a", "b", "c"):
        log.register(ROLE, member)
    log.lease(ROLE, "a", T1, granted_at=0, deadline=30_000)
    log.lease(ROLE, "c", T2, granted_at=30_000, deadline=60_000)  # b was first by rank
    log.lease(ROLE, "c", T2, granted_at=40_000, deadline=70_000)
    caplog.set_level(logging.WARNING, "agents.fold.agent")
    chunk = fold_chunk([(HOME, record) for record in log.records], lambda key: None,
                       lambda partition: None, PARTITIONS, placement="registration",
                       challenge_stagger=5.0)
    for role, seen in chunk.out_of_order:
        _warn_out_of_order(role, seen)
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1
    assert "c took the role at 30000, before its slot at 35000" in warnings[0]
    assert "mix placement policies" in warnings[0]

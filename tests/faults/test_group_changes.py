"""The group-change fault run: its checks on hand-made histories, and a short
run on the real broker (the long one is ``python -m tests.faults.group_changes
--long``; see that module for every check).

The short run: two workers of the application with three user roles. The
worker leading the most roles is SIGKILLed and started again at once (same
member id, its lease still live, its consumer still in the group); the
leader is stopped cleanly; a worker joins; the leader is restarted at once.
After each change the group must settle with no worker exiting on its own,
every role held again within lease + stagger x members of a candidate being
available, no two functions of a role running at once, the events topic
naming exactly the state topic's tenures, and every worker's web view
showing the state topic's holder and token; at the end the history checker
finds nothing.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from krabka.format.records import Lease, encode_key, encode_lease, lease_key, registration_key
from tests.faults import group_changes
from tests.faults.group_changes import (
    PARTITIONS_BACK_SCRIPT,
    SHORT_SCRIPT,
    GroupChangeRun,
    Sampler,
    Tenure,
    check_script,
    event_story,
    holes,
    overlapping,
    overlaps,
    run_sequence,
    state_story,
)

ROLE = "gc.alpha"


def _run(pid: int, tenure: int, start: int, stop: int | None) -> Tenure:
    return Tenure(ROLE, f"m{pid}", pid, tenure, (7, tenure), start, stop)


def test_runs_that_follow_each_other_do_not_overlap():
    assert overlaps([_run(1, 10, 0, 100), _run(2, 20, 100, 200), _run(1, 30, 250, None)]) == []


def test_a_run_starting_before_the_previous_one_stopped_is_an_overlap():
    found = overlaps([_run(1, 10, 0, 100_000_000), _run(2, 20, 99_600_000, 200_000_000)])
    assert len(found) == 1
    assert found[0].startswith("overlap of 0 ms: gc.alpha tenure 10")


def test_a_run_still_running_overlaps_every_later_one():
    found = overlaps([_run(1, 10, 0, None), _run(2, 20, 500, 600)])
    assert len(found) == 1
    assert found[0].startswith("overlap (the earlier still runs)")


def test_an_overlap_is_known_by_its_two_runs_before_and_after_the_earlier_one_stops():
    running = overlapping([_run(1, 10, 0, None), _run(2, 20, 500, None)])
    stopped = overlapping([_run(1, 10, 0, 700), _run(2, 20, 500, None)])
    assert len(running) == 1
    assert running.keys() == stopped.keys()
    assert running != stopped  # the text says how long, once it is known


def test_runs_out_of_tenure_order_are_reported():
    found = overlaps([_run(1, 20, 0, 100), _run(2, 10, 200, 300)])
    assert found == [f"tenure order: {_run(1, 20, 0, 100).describe()} then "
                     f"{_run(2, 10, 200, 300).describe()}"]


def test_holes_are_the_stretches_no_run_covers():
    runs = [_run(1, 10, 0, 100), _run(2, 20, 150, 200), _run(3, 30, 180, None)]
    assert holes(runs, 50, 400) == [(100, 150)]
    assert holes(runs[:2], 50, 400) == [(100, 150), (200, 400)]
    assert holes([], 50, 400) == [(50, 400)]


def _sampler(rounds: list[tuple[int, bool]]) -> Sampler:
    sampler = Sampler(list)
    sampler.rounds = [(at, {ROLE: seen}) for at, seen in rounds]
    return sampler


def test_a_gap_with_a_candidate_throughout_is_charged_whole():
    assert _sampler([(0, True), (200, True), (400, True)]).charged(ROLE, 100, 900) == (800, 0)


def test_a_gap_is_charged_from_the_round_that_first_saw_a_candidate():
    sampler = _sampler([(100, False), (300, False), (500, True), (700, True)])
    assert sampler.charged(ROLE, 50, 900) == (400, 200)  # from 500, to within 300..500


def test_a_gap_whose_last_round_saw_no_candidate_is_charged_from_that_round():
    assert _sampler([(100, False), (300, False)]).charged(ROLE, 50, 400) == (100, 0)


def test_a_gap_between_two_rounds_is_charged_whole():
    assert _sampler([(0, False), (1000, True)]).charged(ROLE, 100, 200) == (100, 0)


def _state_record(offset: int, key: bytes, value: bytes | None) -> SimpleNamespace:
    return SimpleNamespace(offset=offset, key=key, value=value)


def _lease(member: str, epoch: int) -> bytes:
    return encode_lease(Lease(member, 7, epoch, 0, 3000))


def test_the_state_topic_story_is_each_tenures_first_lease_and_each_resignation():
    records = [
        _state_record(0, encode_key(registration_key(ROLE, "a")), b"ignored"),
        _state_record(1, encode_key(lease_key(ROLE)), _lease("a", 1)),
        _state_record(2, encode_key(lease_key(ROLE)), _lease("a", 1)),  # a renewal
        _state_record(3, encode_key(lease_key(ROLE)), None),  # a resigns
        _state_record(4, encode_key(lease_key(ROLE)), None),  # nothing left to clear
        _state_record(5, encode_key(lease_key(ROLE)), _lease("b", 2)),
        _state_record(6, encode_key(lease_key("another role")), _lease("b", 9)),
        _state_record(7, b"garbage", b"garbage"),
        _state_record(8, encode_key(lease_key(ROLE)), _lease("c", 3)),  # b lapsed
    ]
    assert state_story(records) == {
        ("elected", ROLE, 1, 7, 1, "a", 1), ("resigned", ROLE, 1, 7, 1, "a", 3),
        ("elected", ROLE, 5, 7, 2, "b", 5), ("elected", ROLE, 8, 7, 3, "c", 8)}


def _event(kind: str, tenure: int | None, member: str, epoch: int | None,
           offset: int) -> SimpleNamespace:
    token = None if epoch is None else {"producer_id": 7, "producer_epoch": epoch}
    return SimpleNamespace(value=json.dumps(
        {"role": ROLE, "kind": kind, "tenure": tenure, "member": member, "token": token,
         "offset": offset}))


def test_the_events_story_counts_a_repeated_event_once_and_skips_the_other_kinds():
    events = [_event("member-joined", None, "a", None, 0), _event("elected", 1, "a", 1, 1),
              _event("elected", 1, "a", 1, 1), _event("resigned", 1, "a", 1, 3),
              _event("lapsed", 5, "b", 2, 5), _event("elected", 5, "b", 2, 5)]
    assert event_story(events) == {
        ("elected", ROLE, 1, 7, 1, "a", 1), ("resigned", ROLE, 1, 7, 1, "a", 3),
        ("elected", ROLE, 5, 7, 2, "b", 5)}


class StoryRecords(list):
    """Records read off a topic, and which story the test's stand-in tells of them."""

    def __init__(self, which, records):
        super().__init__(records)
        self.which = which


def test_a_disagreement_is_reported_once_with_its_records_and_not_waited_for_again(
        tmp_path, monkeypatch):
    """A disagreement that stays must not cost each later change its wait for
    agreement (the short run would reach the suite's timeout); a new one is
    still waited for and reported. The report lists the role's records."""
    elected = ("elected", ROLE, 1, 7, 1, "a", 1)
    later = ("elected", ROLE, 5, 7, 2, "b", 5)
    stories = {"state": {elected}, "events": set()}

    async def read(bootstrap, topic, partitions):
        if topic == run.group.state_topic:
            return StoryRecords("state", [SimpleNamespace(
                partition=0, offset=1, timestamp=5, key=encode_key(lease_key(ROLE)),
                value=_lease("a", 1))])
        event = _event("lapsed", 1, "a", 1, 9)
        return StoryRecords("events", [SimpleNamespace(partition=0, offset=4, value=event.value)])

    def no_wait(seconds):
        raise AssertionError("waited for agreement again")

    monkeypatch.setattr(group_changes, "_read", read)
    monkeypatch.setattr(group_changes, "state_story", lambda read: stories[read.which])
    monkeypatch.setattr(group_changes, "event_story", lambda read: stories[read.which])
    monkeypatch.setattr(group_changes, "AGREE_WITHIN", 0.0)
    run = GroupChangeRun("localhost:1", tmp_path, 2, log=lambda line: None)

    first = run._disagreements([])
    assert len(first) == 1
    assert str(elected) in first[0]
    assert f"state p0 @1 ts 5: {ROLE} lease a token 7:1 deadline 3000" in first[0]
    assert f"event p0 @4: {ROLE} lapsed tenure 1 offset 9 a" in first[0]

    monkeypatch.setattr(group_changes, "AGREE_WITHIN", 3600.0)
    monkeypatch.setattr(group_changes.time, "sleep", no_wait)
    assert run._disagreements([]) == []

    stories["state"] = {elected, later}
    monkeypatch.setattr(group_changes, "AGREE_WITHIN", 0.0)
    again = run._disagreements([])
    assert len(again) == 1
    assert str(later) in again[0]
    assert str(elected) not in again[0]


@pytest.mark.parametrize(("script", "initial", "message"), [
    (("join",), 2, "every port of the pool in use"),
    (("stop-leader", "stop-standby"), 2, "would stop the last worker"),
    (("reboot",), 2, "is not one of"),
    ((), 3, "start with 1 to 2 workers"),
])
def test_a_script_that_cannot_be_run_is_refused(script, initial, message):
    with pytest.raises(ValueError, match=message):
        check_script(script, initial, 2)


@pytest.mark.integration
def test_two_workers_survive_a_kill_a_clean_stop_a_join_and_a_restart(kafka_bootstrap, tmp_path):
    summary = run_sequence(kafka_bootstrap, tmp_path, 2, SHORT_SCRIPT)
    print(f"\n{summary.text()}")
    assert summary.findings == []
    assert summary.changes == len(SHORT_SCRIPT)
    assert summary.handovers >= 3  # the kill, the clean stop and the restart each moved a role


@pytest.mark.integration
def test_a_worker_given_back_partitions_another_worker_held_goes_on(kafka_bootstrap, tmp_path):
    """A worker's transactional producer of a partition that went to the other worker
    was fenced by that worker's; when the partition came back, Faust reused it and
    the next commit's ProducerFenced stopped the worker (at the final join)."""
    summary = run_sequence(kafka_bootstrap, tmp_path, 2, PARTITIONS_BACK_SCRIPT)
    print(f"\n{summary.text()}")
    assert summary.crashes == 0
    assert summary.findings == []
    assert summary.changes == len(PARTITIONS_BACK_SCRIPT)

"""Placement policies: the balanced order, its golden vectors, and the report of a
role whose members mix policies (docs/design.md#placement).

`tests/unit/vectors/placement.json` was computed with aiokafka's murmur2, not
this library's, so other implementations can assert the same file;
`tests/unit/vectors/README.md` describes it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from krabka import FencingToken, LeadershipOptions, acquire_leadership
from krabka.format.records import Lease
from krabka.rules.evaluate import (
    Step,
    challengers,
    evaluate,
    ordered_challengers,
    out_of_order_slot,
    rendezvous_weight,
)
from krabka.rules.fold import RoleFold, build_role_state
from tests.support.logs import Log

VECTORS = json.loads((Path(__file__).parent / "vectors" / "placement.json")
                     .read_text(encoding="utf-8"))
WEIGHTS: list[dict[str, Any]] = VECTORS["weights"]
ORDERS: list[dict[str, Any]] = VECTORS["orders"]

T1 = FencingToken(1000, 0)
T2 = FencingToken(1001, 0)
STAGGER = 5.0
DEADLINE = 100_000
# For role "billing" the balanced order of worker-1..3 is worker-3, worker-1,
# worker-2 (the vectors pin it): it differs from the registration order.
ROSTER = ("worker-1", "worker-2", "worker-3")


def names(vectors: list[dict[str, Any]]) -> list[str]:
    return [vector["name"] for vector in vectors]


def state_of(roster: list[str], holder: str | None, role: str = "billing"):
    log = Log()
    for member in roster:
        log.register(role, member)
    if holder is not None:
        log.lease(role, holder, T1, deadline=DEADLINE)
    return build_role_state(role, log.records)


@pytest.mark.parametrize("vector", WEIGHTS, ids=names(WEIGHTS))
def test_the_rendezvous_weight_is_murmur2_of_the_length_prefixed_role_and_member(vector):
    role, member = vector["role"].encode(), vector["member"].encode()
    layout = len(role).to_bytes(2, "big") + role + len(member).to_bytes(2, "big") + member
    assert vector["input_hex"] == layout.hex()
    assert rendezvous_weight(vector["role"], vector["member"]) == vector["weight"]


@pytest.mark.parametrize("vector", ORDERS, ids=names(ORDERS))
def test_challenger_orders_match_the_vectors(vector):
    state = state_of(vector["roster"], vector["holder"], vector["role"])
    assert challengers(state, "balanced") == vector["balanced"]
    assert challengers(state, "registration") == vector["registration"]
    assert challengers(state) == vector["registration"]


def test_balanced_challengers_take_their_slots_in_hash_order_the_holder_last():
    state = state_of(list(ROSTER), "worker-1")
    steps = {member: evaluate(state, member, 0, STAGGER, placement="balanced")
             for member in ROSTER}
    assert steps == {
        "worker-3": Step("wait", DEADLINE),
        "worker-2": Step("wait", DEADLINE + 5000),
        "worker-1": Step("wait", DEADLINE + 10_000),
    }


def test_a_role_never_leased_is_first_challenged_a_stagger_after_its_newest_balanced_registration():
    # Registrations at 0, 1 and 2 s: the hash's first, worker-3, may challenge
    # at 2 s + one stagger, the others one stagger apart after it.
    state = state_of(list(ROSTER), None)
    steps = {member: evaluate(state, member, 0, STAGGER, placement="balanced")
             for member in ROSTER}
    assert steps == {
        "worker-3": Step("wait", 7_000),
        "worker-1": Step("wait", 12_000),
        "worker-2": Step("wait", 17_000),
    }


def test_a_member_that_sees_only_itself_waits_a_stagger_for_the_others_to_register():
    alone = state_of(["worker-1"], None)
    assert evaluate(alone, "worker-1", 0, STAGGER, placement="balanced") == Step("wait", 5_000)
    assert evaluate(alone, "worker-1", 5_000, STAGGER,
                    placement="balanced") == Step("challenge", 5_000)


def test_registration_placement_keeps_the_formats_rule_for_a_role_never_leased():
    # roster[0]'s registration (at 0 s), then one stagger per place.
    state = state_of(list(ROSTER), None)
    assert [evaluate(state, member, 0, STAGGER).at_ms for member in ROSTER] == [
        0, 5_000, 10_000]


def test_a_first_tenure_taken_before_the_gathering_stagger_is_reported_by_a_balanced_reader():
    log = Log()
    for member in ROSTER:
        log.register("billing", member)
    early = Lease("worker-3", T1.producer_id, T1.producer_epoch, 6_999, 36_999)
    state = build_role_state("billing", log.records)
    assert out_of_order_slot(state, early, STAGGER, "balanced") == 7_000
    on_time = Lease("worker-3", T1.producer_id, T1.producer_epoch, 7_000, 37_000)
    assert out_of_order_slot(state, on_time, STAGGER, "balanced") is None


def test_a_registration_the_first_winner_cannot_have_seen_does_not_delay_its_slot():
    # worker-4 registers after worker-3, the winner, which may have decided
    # before reading it: its slot counts the registrations up to its own.
    log = Log()
    for member in ROSTER:
        log.register("billing", member)
    log.register("billing", "worker-4", ts=6_000)
    state = build_role_state("billing", log.records)
    lease = Lease("worker-3", T1.producer_id, T1.producer_epoch, 7_000, 37_000)
    assert out_of_order_slot(state, lease, STAGGER, "balanced") is None


def test_a_live_holder_is_not_preempted_by_the_member_the_hash_prefers():
    state = state_of(list(ROSTER), "worker-2")  # worker-3 ranks first by hash
    assert evaluate(state, "worker-3", DEADLINE - 1, STAGGER,
                    placement="balanced") == Step("wait", DEADLINE)


def test_options_refuse_an_unknown_placement_naming_the_choices():
    with pytest.raises(ValueError, match="placement must be one of 'registration', "
                                         "'balanced', got 'even'"):
        LeadershipOptions(placement="even")  # type: ignore[arg-type]


async def test_acquire_leadership_refuses_an_unknown_placement_before_any_io():
    class NoIO:
        def __getattr__(self, name):
            raise AssertionError(f"I/O attempted: {name}")

    with pytest.raises(ValueError, match="placement must be one of"):
        await acquire_leadership(NoIO(), "billing", "a", placement="even")  # type: ignore


def failover_log(winner: str, granted_at: int) -> Log:
    """worker-1 held the role until DEADLINE; `winner` takes it at `granted_at`."""
    log = Log()
    for member in ROSTER:
        log.register("billing", member)
    # A stagger after the newest registration (at 2 s): in order under both policies.
    log.lease("billing", "worker-1", T1, granted_at=7_000, deadline=DEADLINE)
    log.lease("billing", winner, T2, granted_at=granted_at, deadline=granted_at + 30_000)
    return log


def fold(log: Log, placement) -> Any:
    fold = RoleFold("billing", placement=placement, challenge_stagger=STAGGER)
    for record in log.records:
        fold.apply(record)
    return fold.state


def test_a_tenure_taken_before_the_winners_slot_under_the_readers_placement_is_reported():
    # worker-3 is first by hash, second by registration (after worker-2).
    log = failover_log("worker-3", granted_at=DEADLINE)
    reported = fold(log, "registration")
    assert reported.out_of_order == 1
    last = reported.last_out_of_order
    assert (last.offset, last.member, last.granted_at, last.slot, last.placement) == (
        4, "worker-3", DEADLINE, DEADLINE + 5000, "registration")
    assert fold(log, "balanced").out_of_order == 0


def test_a_tenure_taken_in_order_or_late_is_not_reported():
    assert fold(failover_log("worker-2", granted_at=DEADLINE), "registration").out_of_order == 0
    assert fold(failover_log("worker-3", granted_at=DEADLINE + 5000),
                "registration").out_of_order == 0


def test_a_tenure_granted_before_the_replaced_lease_ended_is_not_a_ranking_question():
    # The winner read an older lease than the log's latest (a race the
    # candidate's predecessor check handles), so its slot cannot be judged.
    log = failover_log("worker-3", granted_at=DEADLINE - 1)
    assert fold(log, "registration").out_of_order == 0


def test_renewals_are_never_reported():
    log = failover_log("worker-3", granted_at=DEADLINE)
    log.lease("billing", "worker-3", T2, granted_at=DEADLINE + 1, deadline=DEADLINE + 31_000)
    assert fold(log, "registration").out_of_order == 1


def test_a_fold_told_no_placement_checks_nothing():
    log = failover_log("worker-3", granted_at=DEADLINE)
    assert build_role_state("billing", log.records).out_of_order == 0


def test_members_registered_after_the_winner_and_the_last_lease_record_do_not_count():
    # worker-3 registers after the lapsed lease record and after worker-2:
    # a balanced winner worker-2 may never have seen it, so taking the role
    # at the deadline is in order as far as the log can tell.
    log = Log()
    log.register("billing", "worker-1")
    log.lease("billing", "worker-1", T1, deadline=DEADLINE)
    log.register("billing", "worker-2")
    log.register("billing", "worker-3")
    state = build_role_state("billing", log.records)
    lease = Lease("worker-2", T2.producer_id, T2.producer_epoch, DEADLINE, DEADLINE + 30_000)
    assert out_of_order_slot(state, lease, STAGGER, "balanced") is None


def test_a_balanced_order_without_its_role_is_refused():
    with pytest.raises(ValueError, match="pass the role"):
        ordered_challengers(["a", "b"], None, placement="balanced")

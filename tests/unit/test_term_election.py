"""evaluate_term: one test per rule of docs/term-mode.md#the-election-rule (when a
follower claims, in which order, the resign, the leader's own step), and that
the challenge order is epoch mode's."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from krabka import FencingToken
from krabka.rules.evaluate import challenger_index
from krabka.rules.fold import build_role_state
from krabka.term.election import TermStep, deposed, evaluate_term
from krabka.term.fold import build_term_view
from tests.support.logs import Log
from tests.support.term_logs import TermLog

ROSTER = ["a", "b", "c", "d"]
TIMEOUT = 30_000
STAGGER = 5.0  # 5000 ms
QUIET = 1_000_000


def held_by(holder="a", term=1, *, resigned=False):
    log = TermLog()
    log.claim("r", holder, term)
    if resigned:
        log.resign("r", holder, term)
    return build_term_view("r", log.records)


def step(view, member, now, term=0, roster=ROSTER):
    return evaluate_term(view, roster, member, now, QUIET, TIMEOUT, STAGGER, term)


def test_the_holder_of_the_highest_term_leads():
    assert step(held_by("a", 3), "a", QUIET, term=3) == TermStep("lead", QUIET, 3)


def test_the_holder_does_not_lead_a_term_it_does_not_hold():
    # A previous incarnation's term, or a second process sharing the member id.
    assert step(held_by("a", 3), "a", QUIET, term=2).action != "lead"


def test_term_0_never_leads():
    assert step(held_by("a", 1), "a", QUIET, term=0).action != "lead"


def test_a_resigned_holder_does_not_lead():
    assert step(held_by("a", 1, resigned=True), "a", QUIET, term=1).action != "lead"


def test_a_member_not_in_the_roster_registers():
    assert step(held_by(), "e", QUIET) == TermStep("register", QUIET, 0)


def test_the_first_challenger_waits_out_the_election_timeout_then_claims_the_next_term():
    view = held_by("a", 4)
    assert step(view, "b", QUIET + TIMEOUT - 1) == TermStep("wait", QUIET + TIMEOUT, 5)
    assert step(view, "b", QUIET + TIMEOUT) == TermStep("claim", QUIET + TIMEOUT, 5)


def test_later_challengers_are_one_stagger_apart_and_the_holder_is_last():
    view = held_by("b")
    slots = {m: step(view, m, 0).at_ms - QUIET - TIMEOUT for m in ROSTER}
    assert slots == {"a": 0, "c": 5_000, "d": 10_000, "b": 15_000}


def test_after_a_resign_the_next_in_rank_claims_at_once():
    view = held_by("a", 1, resigned=True)
    assert step(view, "b", QUIET) == TermStep("claim", QUIET, 2)
    assert step(view, "c", QUIET) == TermStep("wait", QUIET + 5_000, 2)


def test_a_role_never_claimed_is_claimed_at_once_by_the_first_in_rank():
    view = build_term_view("r", [])
    assert step(view, "a", QUIET) == TermStep("claim", QUIET, 1)
    assert step(view, "b", QUIET).at_ms == QUIET + 5_000


def test_a_negative_election_timeout_is_refused():
    with pytest.raises(ValueError, match="election_timeout_ms"):
        evaluate_term(held_by(), ROSTER, "b", 0, 0, -1, STAGGER)


def test_a_leader_is_deposed_by_a_claim_of_a_higher_term_only():
    log = TermLog()
    log.claim("r", "a", 1)
    log.claim("r", "b", 1)
    assert not deposed(build_term_view("r", log.records), 1)
    log.claim("r", "b", 2)
    assert deposed(build_term_view("r", log.records), 1)


@given(
    st.permutations(ROSTER),
    st.sampled_from([*ROSTER, "gone"]),
    st.sampled_from(ROSTER),
)
def test_the_challenge_order_is_epoch_modes_for_the_same_roster_and_holder(order, holder, member):
    state_log = Log()
    for name in order:
        state_log.register("r", name)
    if holder != "gone":
        state_log.lease("r", holder, FencingToken(1, 0), deadline=0)
    state = build_role_state("r", state_log.records)
    term_log = TermLog()
    if holder != "gone":
        term_log.claim("r", holder, 1)
    view = build_term_view("r", term_log.records)
    timeout = 0 if holder == "gone" else TIMEOUT
    slot = evaluate_term(view, order, member, 0, 0, TIMEOUT, STAGGER).at_ms
    assert slot == timeout + challenger_index(state, member) * 5_000

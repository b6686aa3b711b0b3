"""evaluate: one test per rule of docs/design.md#the-election-rules (rank, slots,
the token check, the order)."""

import pytest

from krabka import FencingToken
from krabka.format.token import NO_EPOCH
from krabka.rules.evaluate import Step, evaluate, stagger_ms
from krabka.rules.fold import build_role_state
from tests.support.logs import Log

T1 = FencingToken(1000, 0)
T2 = FencingToken(1000, 1)
STAGGER = 5.0  # 5000 ms
DEADLINE = 100_000


def roster_with_lease(holder="a", token=T1, members=("a", "b", "c", "d")):
    log = Log()
    for member in members:
        log.register("r", member)
    log.lease("r", holder, token, deadline=DEADLINE)
    return build_role_state("r", log.records)


def test_the_live_holder_with_its_token_leads_until_the_deadline():
    state = roster_with_lease()
    assert evaluate(state, "a", DEADLINE - 1, STAGGER, T1) == Step("lead", DEADLINE)


def test_the_holder_does_not_lead_once_its_lease_has_lapsed():
    state = roster_with_lease()
    assert evaluate(state, "a", DEADLINE, STAGGER, T1).action != "lead"


def test_the_holder_with_another_token_does_not_lead():
    state = roster_with_lease(token=T2)
    assert evaluate(state, "a", 0, STAGGER, T1).action == "wait"


def test_no_epoch_never_leads_even_under_a_lease_carrying_minus_one():
    state = roster_with_lease(token=NO_EPOCH)
    assert evaluate(state, "a", 0, STAGGER, NO_EPOCH).action == "wait"


@pytest.mark.parametrize(("member", "rank"), [("b", 0), ("c", 1), ("d", 2)])
def test_challengers_wait_for_the_deadline_plus_their_rank_in_staggers(member, rank):
    state = roster_with_lease()
    assert evaluate(state, member, 0, STAGGER) == Step("wait", DEADLINE + rank * 5000)


def test_the_first_challenger_challenges_exactly_at_the_deadline():
    state = roster_with_lease()
    assert evaluate(state, "b", DEADLINE, STAGGER) == Step("challenge", DEADLINE)


def test_a_challenger_waits_one_millisecond_before_its_slot():
    state = roster_with_lease()
    assert evaluate(state, "c", DEADLINE + 4999, STAGGER) == Step("wait", DEADLINE + 5000)


def test_the_lapsed_holder_comes_last_among_the_challengers():
    state = roster_with_lease(holder="b")
    # challengers in roster order without b: a, c, d; b itself is n = 3
    assert evaluate(state, "a", 0, STAGGER).at_ms == DEADLINE
    assert evaluate(state, "c", 0, STAGGER).at_ms == DEADLINE + 5000
    assert evaluate(state, "b", DEADLINE, STAGGER, T1) == Step("wait", DEADLINE + 3 * 5000)


def test_a_member_named_by_a_live_lease_of_another_incarnation_ranks_last():
    state = roster_with_lease(holder="a", token=T2)
    assert evaluate(state, "a", 0, STAGGER, T1) == Step("wait", DEADLINE + 3 * 5000)


def test_a_holder_that_is_not_registered_leaves_every_member_ranked_in_roster_order():
    state = roster_with_lease(holder="zz", members=("a", "b"))
    assert evaluate(state, "a", 0, STAGGER).at_ms == DEADLINE
    assert evaluate(state, "b", 0, STAGGER).at_ms == DEADLINE + 5000


def test_in_a_vacancy_the_member_whose_lease_was_cleared_comes_last():
    log = Log()
    for member in ("a", "b", "c"):
        log.register("r", member)
    log.lease("r", "a", T1, deadline=DEADLINE)
    log.clear_lease("r", ts=50_000)
    state = build_role_state("r", log.records)
    assert evaluate(state, "b", 0, STAGGER).at_ms == 50_000
    assert evaluate(state, "c", 0, STAGGER).at_ms == 55_000
    assert evaluate(state, "a", 0, STAGGER).at_ms == 60_000


def test_a_vacancy_is_timed_from_the_tombstone_not_the_old_deadline():
    log = Log()
    log.register("r", "b")
    log.lease("r", "a", T1, deadline=DEADLINE)
    log.clear_lease("r", ts=50_000)
    state = build_role_state("r", log.records)
    assert evaluate(state, "b", 50_000, STAGGER) == Step("challenge", 50_000)


def test_a_role_never_leased_is_timed_from_the_first_members_latest_registration():
    log = Log()
    log.register("r", "a", ts=7_000)
    log.register("r", "b", ts=8_000)
    state = build_role_state("r", log.records)
    assert evaluate(state, "a", 0, STAGGER) == Step("wait", 7_000)
    assert evaluate(state, "b", 0, STAGGER) == Step("wait", 12_000)


def test_a_lease_tombstone_without_a_retained_lease_times_the_vacancy_from_the_tombstone():
    log = Log()
    log.register("r", "a", ts=7_000)
    log.clear_lease("r", ts=9_000)
    state = build_role_state("r", log.records)
    assert evaluate(state, "a", 0, STAGGER) == Step("wait", 9_000)


def test_an_unregistered_member_registers():
    state = roster_with_lease()
    assert evaluate(state, "new", 0, STAGGER) == Step("register", 0)


def test_lead_is_checked_before_register():
    state = roster_with_lease(holder="ghost", members=("a",))
    assert evaluate(state, "ghost", 10, STAGGER, T1) == Step("lead", DEADLINE)


def test_register_is_checked_before_challenge():
    state = roster_with_lease()
    assert evaluate(state, "new", DEADLINE * 10, STAGGER) == Step("register", DEADLINE * 10)


def test_a_deregistered_member_must_register_again():
    log = Log()
    log.register("r", "a")
    log.register("r", "b")
    log.deregister("r", "a")
    assert evaluate(build_role_state("r", log.records), "a", 0, STAGGER).action == "register"


@pytest.mark.parametrize(
    ("stagger", "expected"),
    [(5.0, 5000), (0.5, 500), (0.0005, 1), (0.0004999, 0), (1.2345, 1235), (0.0, 0)],
)
def test_the_stagger_rounds_half_up_to_milliseconds(stagger, expected):
    assert stagger_ms(stagger) == expected

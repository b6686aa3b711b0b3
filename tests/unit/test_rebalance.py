"""Rebalancing balanced roles by handover (docs/design.md#rebalancing): the plan
as a pure function, and a group of members on the in-process model evening
out its roles, and giving a joining member its share, without preempting a
live holder and without leaving a role vacant for longer than one stagger.
"""

from __future__ import annotations

import asyncio
from itertools import pairwise

from krabka import LeadershipOptions
from krabka.format.records import Lease
from krabka.rules.evaluate import ordered_challengers
from krabka.rules.state import RoleState, RosterEntry
from krabka.runner import RunnerState
from krabka.scale.rebalance import LANDING_POLL, Rebalancer, plan
from krabka.testing import ManualClock
from tests.support.loop import run_ready_callbacks
from tests.support.rebalancing import Group, vacancies
from tests.support.sim import STAGGER, Cluster

ROLES = [f"role-{i:03d}" for i in range(300)]
MEMBERS = ["worker-1", "worker-2", "worker-3"]
NOW = 1_000_000


def state(role: str, holder: str | None, roster: list[str],
          registered: dict[str, int] | None = None) -> RoleState:
    """`role`'s state: `roster` registered at time 0, or at `registered[member]`."""
    at = registered or {}
    entries = [RosterEntry(name, offset, at.get(name, 0), at.get(name, 0))
               for offset, name in enumerate(roster)]
    lease = None if holder is None else Lease(holder, 1, 0, NOW - 1, NOW + 30_000)
    return RoleState(role, entries=entries, lease=lease)


def successor(role: str, holder: str, roster: list[str]) -> str:
    return ordered_challengers(roster, holder, role=role, placement="balanced")[0]


def test_a_member_at_or_below_its_fair_share_plans_nothing():
    roster = ["a", "b"]
    states = {f"r{i}": state(f"r{i}", "a" if i < 2 else "b", roster) for i in range(4)}
    decided = plan(states, "a", {"a", "b"}, NOW)
    assert decided.fair_share == 2
    assert decided.held == {"a": 2, "b": 2}
    assert decided.moves == ()


def test_surplus_roles_go_only_to_their_successor_while_it_is_under_its_share():
    roster = ["a", "b", "c"]
    states = {f"r{i}": state(f"r{i}", "a", roster) for i in range(9)}
    decided = plan(states, "a", {"a", "b", "c"}, NOW)
    assert decided.fair_share == 3
    assert len(decided.moves) == 6
    for move in decided.moves:
        assert move.taker == successor(move.role, "a", roster)
    taken = [move.taker for move in decided.moves]
    assert max(taken.count("b"), taken.count("c")) <= 3


def test_a_successor_that_is_not_live_or_not_registered_gets_nothing():
    states = {f"r{i}": state(f"r{i}", "a", ["a", "b"]) for i in range(4)}
    assert plan(states, "a", {"a"}, NOW).moves == ()  # b is not live
    states = {f"r{i}": state(f"r{i}", "a", ["a"]) for i in range(4)}
    assert plan(states, "a", {"a", "b"}, NOW).moves == ()  # b is live but not registered


def test_a_live_member_registered_for_less_than_the_settle_time_is_not_counted_yet():
    roster = ["a", "b"]
    states = {f"r{i}": state(f"r{i}", "a", roster) for i in range(4)}
    known = {(role, "b"): 400 for role in states}
    waiting = plan(states, "a", {"a", "b"}, NOW, settle_ms=1000, known_ms=known)
    assert waiting.moves == ()
    # The plan says what it waits for: a plan without moves is not a balanced group.
    assert (waiting.members, waiting.standing) == (("a",), ("b",))
    assert waiting.to_json()["standing"] == ["b"]
    # A registration the caller does not list is one just seen.
    assert plan(states, "a", {"a", "b"}, NOW, settle_ms=1000).standing == ("b",)
    known = {(role, "b"): 1000 for role in states}
    settled = plan(states, "a", {"a", "b"}, NOW, settle_ms=1000, known_ms=known)
    assert [move.taker for move in settled.moves] == ["b", "b"]
    assert settled.standing == ()


def test_a_role_whose_successor_is_standing_up_is_not_handed_to_the_next():
    """c, still standing up, would claim the role first: it is not handed over."""
    roster = ["a", "b", "c"]
    states = {f"r{i}": state(f"r{i}", "a", roster) for i in range(4)}
    known = {(role, name): 1000 for role in states for name in ("a", "b")}
    decided = plan(states, "a", {"a", "b", "c"}, NOW, settle_ms=1000, known_ms=known)
    assert decided.standing == ("c",)
    assert decided.moves, "b is settled and under its share"
    for move in decided.moves:
        assert successor(move.role, "a", roster) == "b"
    assert {successor(role, "a", roster) for role in states} == {"b", "c"}


def test_a_lapsed_lease_is_not_counted_as_held():
    roster = ["a", "b"]
    states = {"r": state("r", "a", roster)}
    assert plan(states, "b", {"a", "b"}, NOW + 60_000).held == {"a": 0, "b": 0}


def test_the_plan_says_why_in_words_and_in_json():
    states = {f"r{i}": state(f"r{i}", "a", ["a", "b"]) for i in range(4)}
    decided = plan(states, "a", {"a", "b"}, NOW)
    assert "over the fair share of 2" in decided.moves[0].reason
    shown = decided.to_json()
    assert shown["fair_share"] == 2
    assert shown["held"] == {"a": 4, "b": 0}
    assert [m["to"] for m in shown["moves"]] == ["b", "b"]


async def test_a_group_evens_out_and_a_joining_member_gets_its_share_by_handovers():
    cluster = Cluster(partitions=16)
    # A long lease keeps 1 200 runners' renewals few; handovers do not wait for it.
    options = LeadershipOptions(partitions=cluster.partitions, lease_duration=30,
                                renew_interval=10, challenge_stagger=STAGGER,
                                placement="balanced")
    group = Group(ROLES, options, cluster.clock, interval=STAGGER * 2)
    group.watch(cluster.transport())
    try:
        for member in MEMBERS:
            group.join(member, cluster.transport())
        await cluster.until(lambda: sum(group.split().values()) == len(ROLES), within=5,
                            step_ms=50)
        await cluster.until(group.within_ten_percent, within=60, step_ms=50)
        group.join("worker-4", cluster.transport())
        await cluster.until(group.within_ten_percent, within=120, step_ms=50)
        # And it stays so while the plans go on.
        await cluster.advance(10, step_ms=50)
        assert group.within_ten_percent()
        moves = [m for r in group.rebalancers.values() for m in r.moves]
        assert any(move.taker == "worker-4" for move in moves)
        assert group.rebalancers["worker-1"].last_plan is not None
        found, vacant = vacancies(cluster.state_records())
        assert max(vacancy.ms for vacancy in found) <= STAGGER * 1000
        assert not vacant
    finally:
        await group.stop_rebalancing()
        await cluster.stop_runners(*group.every_runner(), within=60)


class FakeRunner:
    """A runner that leads until told to step down."""

    def __init__(self) -> None:
        self.state = RunnerState.LEADING

    def step_down(self) -> None:
        self.state = RunnerState.HANDING_OVER


def one_surplus_role() -> tuple[Rebalancer, dict[str, RoleState], ManualClock]:
    """Member a holds both roles; b, registered long ago, holds none: a's plan
    is one handover, to b."""
    clock = ManualClock(start_ms=NOW)
    states = {role: state(role, "a", ["a", "b"]) for role in ("role-0", "role-1")}
    runners = {role: FakeRunner() for role in states}
    rebalancer = Rebalancer("a", runners, lambda: states, lambda: {"a", "b"}, clock,
                            interval=10, settle=0)  # type: ignore[arg-type]
    return rebalancer, states, clock


def leased_to(state: RoleState, member: str, now_ms: int) -> RoleState:
    return RoleState(state.role, entries=state.entries,
                     lease=Lease(member, 2, 0, now_ms, now_ms + 30_000))


async def begin_turn(rebalancer: Rebalancer) -> asyncio.Future[None]:
    """`rebalancer.next_turn()`, begun now (its interval counts from now)."""
    turn = asyncio.ensure_future(rebalancer.next_turn())
    await run_ready_callbacks()
    return turn


async def advance(clock: ManualClock, ms: int) -> None:
    """Move `clock` by `ms` in steps of one landing poll, letting tasks run at each."""
    poll = round(LANDING_POLL * 1000)
    for _ in range(ms // poll):
        clock.advance_ms(poll)
        await run_ready_callbacks()


def registration_skew_case(skew_ms: int
                           ) -> tuple[Rebalancer, dict[str, RoleState], ManualClock]:
    """Member a holds both roles; b has just registered for them, its wall clock
    `skew_ms` ahead of a's (the record's timestamp is b's); a settles in 1 s."""
    clock = ManualClock(start_ms=NOW)
    states = {role: state(role, "a", ["a", "b"], registered={"b": NOW + skew_ms})
              for role in ("role-0", "role-1")}
    runners = {role: FakeRunner() for role in states}
    rebalancer = Rebalancer("a", runners, lambda: states, lambda: {"a", "b"}, clock,
                            interval=10, settle=1)  # type: ignore[arg-type]
    return rebalancer, states, clock


def test_the_settle_time_runs_on_the_planner_s_clock_whatever_the_taker_s_says():
    for skew_ms in (10 * 60_000, -10 * 60_000):  # b's clock 10 minutes ahead, or behind
        rebalancer, _, clock = registration_skew_case(skew_ms)
        assert rebalancer.step() is None, "a registration just seen has not settled"
        assert rebalancer.last_plan is not None
        assert rebalancer.last_plan.standing == ("b",)
        clock.advance_ms(999)
        assert rebalancer.step() is None
        clock.advance_ms(1)
        made = rebalancer.step()
        assert made is not None, f"b's clock {skew_ms} ms off: known for 1 s, settled"
        assert made.taker == "b"


def test_a_member_still_registering_is_not_counted_so_it_moves_nothing_between_the_others():
    """a and b hold r0..r5, three each; c joins and has registered for r0 and r1
    only. Counted, it would shrink the roles all live members host to those two,
    both a's, and a would hand r0 to b (its successor there, and settled)."""
    clock = ManualClock(start_ms=NOW)
    states = {f"r{i}": state(f"r{i}", "a" if i < 3 else "b", ["a", "b"]) for i in range(6)}
    runners = {role: FakeRunner() for role in states}
    rebalancer = Rebalancer("a", runners, lambda: states, lambda: {"a", "b", "c"}, clock,
                            interval=10, settle=1)  # type: ignore[arg-type]
    rebalancer.step()
    clock.advance_ms(1000)
    for role in ("r0", "r1"):
        states[role] = state(role, states[role].lease.member, ["a", "b", "c"])
    assert rebalancer.step() is None
    assert rebalancer.last_plan is not None
    assert (rebalancer.last_plan.members, rebalancer.last_plan.standing) == (("a", "b"), ("c",))
    assert (rebalancer.last_plan.roles, rebalancer.last_plan.fair_share) == (6, 3)
    assert rebalancer.last_plan.to_json()["standing"] == ["c"]
    # Once c stands for every role it hosts, and has for the settle time, it counts.
    for i in range(2, 6):
        states[f"r{i}"] = state(f"r{i}", states[f"r{i}"].lease.member, ["a", "b", "c"])
    assert rebalancer.step() is None
    clock.advance_ms(999)
    assert rebalancer.step() is None
    assert rebalancer.last_plan.standing == ("c",)
    clock.advance_ms(1)
    made = rebalancer.step()
    assert rebalancer.last_plan.members == ("a", "b", "c")
    assert made is not None
    assert made.taker == "c"


def test_a_member_registering_again_stays_counted_but_one_that_left_stands_up_again():
    rebalancer, states, clock = registration_skew_case(0)
    rebalancer.step()
    clock.advance_ms(1000)
    # b stands again (a new registration record, as after every handover it makes).
    for role, old in list(states.items()):
        entries = [RosterEntry(e.member, e.offset + 10, e.registered_at, e.timestamp)
                   if e.member == "b" else e for e in old.entries]
        states[role] = RoleState(role, entries=entries, lease=old.lease)
    assert rebalancer.step() is not None, "b registered again: it was standing already"
    # b deregistered from role-1 and registered again: it is standing up anew.
    states["role-1"] = state("role-1", "a", ["a"])
    rebalancer.step()
    states["role-1"] = state("role-1", "a", ["a", "b"])
    assert rebalancer.step() is None
    assert rebalancer.last_plan is not None
    assert rebalancer.last_plan.standing == ("b",)


async def test_the_next_plan_comes_as_soon_as_the_handover_has_landed():
    rebalancer, states, clock = one_surplus_role()
    made = rebalancer.step()
    assert made is not None
    assert rebalancer.in_flight == made
    turn = await begin_turn(rebalancer)
    await advance(clock, 1_000)
    assert not turn.done(), "the role is still a's: the handover has not landed"
    states[made.role] = leased_to(states[made.role], made.taker, clock.now_ms())
    await advance(clock, round(LANDING_POLL * 1000))
    assert turn.done(), "b leases the role: the next turn is due at once"


async def test_a_handover_that_never_lands_delays_the_next_plan_by_one_interval_only():
    rebalancer, states, clock = one_surplus_role()
    made = rebalancer.step()
    assert made is not None
    turn = await begin_turn(rebalancer)
    await advance(clock, 9_980)
    assert not turn.done()
    await advance(clock, 20)
    assert turn.done()
    # A turn that made no handover (its plan failed, or moved nothing) waits a
    # whole interval, though the last handover has landed since.
    states[made.role] = leased_to(states[made.role], made.taker, clock.now_ms())
    turn = await begin_turn(rebalancer)
    await advance(clock, 9_980)
    assert not turn.done()
    await advance(clock, 20)
    assert turn.done()


async def test_a_member_over_its_share_hands_over_one_role_after_another_not_one_an_interval():
    cluster = Cluster(partitions=4)
    options = LeadershipOptions(partitions=cluster.partitions, lease_duration=30,
                                renew_interval=10, challenge_stagger=STAGGER,
                                placement="balanced")
    interval = STAGGER * 8
    group = Group(ROLES[:20], options, cluster.clock, interval=interval)
    group.watch(cluster.transport())
    try:
        group.join("worker-1", cluster.transport())
        await cluster.until(lambda: group.split() == {"worker-1": 20}, within=10, step_ms=50)
        group.join("worker-2", cluster.transport())
        await cluster.until(lambda: group.split()["worker-2"] == 10, within=interval * 4,
                            step_ms=10)
        moves = group.rebalancers["worker-1"].moves
        assert [move.taker for move in moves] == ["worker-2"] * 10
        gaps = [later.at_ms - earlier.at_ms for earlier, later in pairwise(moves)]
        # Each handover lands within one stagger, and the next follows it.
        assert max(gaps) <= STAGGER * 1000, gaps
    finally:
        await group.stop_rebalancing()
        await cluster.stop_runners(*group.every_runner(), within=60)

"""Rebalancing balanced roles by handover (docs/design.md#rebalancing): the plan
as a pure function, and a group of members on the in-process model evening
out its roles, and giving a joining member its share, without preempting a
live holder and without leaving a role vacant for longer than one stagger.
"""

from __future__ import annotations

import asyncio
import contextlib

from coordination import (
    LeaderRunner,
    LeadershipOptions,
    Lease,
    RoleState,
    RosterEntry,
    decode_key,
    decode_lease,
    watch_roles,
)
from coordination.evaluate import ordered_challengers
from coordination.rebalance import Rebalancer, plan
from coordination.records import Kind
from tests.support.sim import STAGGER, Cluster

ROLES = [f"role-{i:03d}" for i in range(300)]
MEMBERS = ["worker-1", "worker-2", "worker-3"]
NOW = 1_000_000


def state(role: str, holder: str | None, roster: list[str]) -> RoleState:
    entries = [RosterEntry(name, offset, 0, 0) for offset, name in enumerate(roster)]
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


class Group:
    """Members each running one LeaderRunner per role, and a Rebalancer each."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.states: dict[str, RoleState] = {}
        self.members: list[str] = []
        self.runners: dict[str, dict[str, LeaderRunner]] = {}
        self.rebalancers: dict[str, Rebalancer] = {}
        self.tasks: list[asyncio.Task[None]] = []
        # A long lease keeps 1 200 runners' renewals few; handovers do not wait for it.
        self.options = LeadershipOptions(partitions=cluster.partitions, lease_duration=30,
                                         renew_interval=10, challenge_stagger=STAGGER,
                                         placement="balanced")

    async def watch(self) -> None:
        async with watch_roles(self.cluster.transport(), self.cluster.partitions,
                               since="beginning") as watch:
            async for change in watch:
                self.states[change.role] = change.state

    def join(self, member: str) -> None:
        transport = self.cluster.transport()
        self.members.append(member)
        runners = {role: LeaderRunner(transport, role, member, self.work,
                                      options=self.options, clock=self.cluster.clock)
                   for role in ROLES}
        self.runners[member] = runners
        for runner in runners.values():
            runner.start()
        rebalancer = Rebalancer(member, runners, lambda: self.states,
                                lambda: self.members, self.cluster.clock,
                                interval=STAGGER * 2)
        self.rebalancers[member] = rebalancer
        self.tasks.append(asyncio.create_task(rebalancer.run()))

    @staticmethod
    async def work(leadership) -> None:
        await leadership.done

    def split(self) -> dict[str, int]:
        counts = dict.fromkeys(self.members, 0)
        for runners in self.runners.values():
            for runner in runners.values():
                if runner.leading:
                    counts[runner.member] += 1
        return counts

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        runners = [r for runners in self.runners.values() for r in runners.values()]
        await self.cluster.stop_runners(*runners, within=60)


def longest_vacancy_ms(cluster: Cluster) -> int:
    """The longest time, by record timestamps, between a lease tombstone and the
    role's next lease record, over every role."""
    longest = 0
    for partition in range(cluster.partitions):
        cleared: dict[str, int] = {}
        for record in cluster.broker.partition("__coordination_state", partition) \
                .read_committed(0).records:
            key = decode_key(record.key)
            if key.kind is not Kind.LEASE:
                continue
            if record.value is None:
                cleared.setdefault(key.role, record.timestamp)
            elif key.role in cleared:
                decode_lease(record.value)
                longest = max(longest, record.timestamp - cleared.pop(key.role))
    return longest


def within_ten_percent(split: dict[str, int]) -> bool:
    even = len(ROLES) / len(split)
    return all(abs(count - even) <= even / 10 for count in split.values())


async def test_a_group_evens_out_and_a_joining_member_gets_its_share_by_handovers():
    cluster = Cluster(partitions=16)
    group = Group(cluster)
    watching = asyncio.create_task(group.watch())
    try:
        for member in MEMBERS:
            group.join(member)
        await cluster.until(lambda: sum(group.split().values()) == len(ROLES), within=5,
                            step_ms=50)
        await cluster.until(lambda: within_ten_percent(group.split()), within=60, step_ms=50)
        group.join("worker-4")
        await cluster.until(lambda: within_ten_percent(group.split()), within=120, step_ms=50)
        # And it stays so while the plans go on.
        await cluster.advance(10, step_ms=50)
        assert sum(group.split().values()) == len(ROLES)
        assert within_ten_percent(group.split())
        moves = [m for r in group.rebalancers.values() for m in r.moves]
        assert any(move.taker == "worker-4" for move in moves)
        assert group.rebalancers["worker-1"].last_plan is not None
        assert longest_vacancy_ms(cluster) <= STAGGER * 1000
    finally:
        await group.stop()
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching

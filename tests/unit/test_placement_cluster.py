"""Placement across a group of members, on the in-process model with time driven
by hand (docs/design.md#placement): how roles spread under each policy, that
a joining member preempts nothing, and how a role whose members mix policies
is reported.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

import pytest

from krabka import (
    LeaderRunner,
    LeadershipOptions,
    describe_role_state,
)
from krabka.rules.evaluate import challengers
from tests.support.sim import LEASE, RENEW, STAGGER, Cluster, crash

ROLES = [f"role-{i:03d}" for i in range(300)]
MEMBERS = ["worker-1", "worker-2", "worker-3"]


async def start_group(cluster: Cluster, members: list[str], roles: list[str], placement: str):
    """Every member stands for every role, each member one process; all start at one instant."""
    tasks = {}
    for member in members:
        transport = cluster.transport()
        for role in roles:
            tasks[member, role] = cluster.candidate(member, role=role, transport=transport,
                                                    placement=placement)
    return tasks


def holders(tasks) -> dict[str, str]:
    return {role: member for (member, role), task in tasks.items() if task.done()}


async def states(cluster: Cluster, roles: list[str]):
    transport = cluster.transport()
    return {role: await describe_role_state(transport, role, cluster.partitions)
            for role in roles}


def cancel_standbys(tasks) -> None:
    for task in tasks.values():
        if not task.done():
            task.cancel()


@pytest.fixture
async def balanced_group():
    cluster = Cluster(partitions=16)
    tasks = await start_group(cluster, MEMBERS, ROLES, "balanced")
    # A role never leased waits one stagger past its newest registration.
    await cluster.until(lambda: len(holders(tasks)) == len(ROLES), within=1 + STAGGER,
                        step_ms=50)
    yield cluster, tasks
    cancel_standbys(tasks)


async def test_balanced_placement_spreads_300_roles_within_ten_percent_of_an_even_split(
        balanced_group):
    cluster, tasks = balanced_group
    count = Counter(holders(tasks).values())
    assert sorted(count) == MEMBERS
    assert all(90 <= count[member] <= 110 for member in MEMBERS), count
    # Each role is led by the member its rendezvous hash prefers.
    for role, state in (await states(cluster, ROLES)).items():
        assert state.holder == challengers(_without_lease(state), "balanced")[0], role


def _without_lease(state):
    """The role's roster as it stood before its first lease (nobody holds it)."""
    before = state.copy()
    before.lease = None
    return before


async def test_members_starting_a_moment_apart_each_take_the_roles_the_hash_gives_them_at_once():
    # The first member to start sees none of the others; the first slot of a
    # role never leased is one stagger after its newest registration, so the
    # members that start within a stagger of it are ranked too.
    cluster = Cluster(partitions=16)
    roles = ROLES[:60]
    tasks = {}
    for member in MEMBERS:
        transport = cluster.transport()
        for role in roles:
            tasks[member, role] = cluster.candidate(member, role=role, transport=transport,
                                                    placement="balanced")
        await cluster.advance(STAGGER / 3)
    try:
        await cluster.until(lambda: len(holders(tasks)) == len(roles), within=1 + STAGGER,
                            step_ms=50)
        for role, state in (await states(cluster, roles)).items():
            assert state.holder == challengers(_without_lease(state), "balanced")[0], role
            # One tenure: no member took the role and was superseded.
            assert sum(tasks[member, role].done() for member in MEMBERS) == 1, role
        assert sorted(Counter(holders(tasks).values())) == MEMBERS
    finally:
        cancel_standbys(tasks)


async def test_a_member_joining_a_balanced_group_takes_no_role_from_a_live_holder(
        balanced_group):
    cluster, _ = balanced_group
    before = await states(cluster, ROLES)
    joining = cluster.transport()
    newcomer = {role: cluster.candidate("worker-4", role=role, transport=joining,
                                        placement="balanced") for role in ROLES}
    await cluster.advance(LEASE * 2, step_ms=200)
    after = await states(cluster, ROLES)
    assert not any(task.done() for task in newcomer.values())
    # worker-4 is registered everywhere and preferred by the hash for about a
    # quarter of the roles, yet every tenure goes on: no preemption.
    assert all("worker-4" in after[role].roster for role in ROLES)
    preferred = sum(challengers(_without_lease(after[role]), "balanced")[0] == "worker-4"
                    for role in ROLES)
    assert preferred > 50
    assert {role: (s.holder, s.token, s.tenure) for role, s in after.items()} == {
        role: (s.holder, s.token, s.tenure) for role, s in before.items()}
    cancel_standbys(newcomer)


async def test_registration_placement_puts_every_role_on_the_first_registrant():
    cluster = Cluster(partitions=16)
    tasks = await start_group(cluster, MEMBERS, ROLES, "registration")
    try:
        await cluster.until(lambda: len(holders(tasks)) == len(ROLES), within=1, step_ms=50)
        assert Counter(holders(tasks).values()) == {"worker-1": len(ROLES)}
    finally:
        cancel_standbys(tasks)


async def test_a_crashed_holders_roles_go_to_the_next_member_by_hash_at_the_deadline():
    cluster = Cluster(partitions=4)
    roles = ROLES[:30]
    tasks = await start_group(cluster, MEMBERS, roles, "balanced")
    try:
        await cluster.until(lambda: len(holders(tasks)) == len(roles), within=1)
        lost = [role for role, member in holders(tasks).items() if member == "worker-1"]
        expected = {}
        for role in lost:
            state = (await states(cluster, [role]))[role]
            expected[role] = challengers(state, "balanced")[0]
            crash(tasks["worker-1", role].result())
        for role in lost:
            del tasks["worker-1", role]
        await cluster.until(lambda: len(holders(tasks)) == len(roles), within=LEASE + 1)
        taken = holders(tasks)
        assert {role: taken[role] for role in lost} == expected
        assert set(expected.values()) == {"worker-2", "worker-3"}  # spread, not all on one
    finally:
        cancel_standbys(tasks)


async def test_the_runner_campaigns_under_the_placement_of_its_options():
    # For role "billing" the hash prefers worker-3 over worker-1
    # (tests/unit/vectors/placement.json), although worker-1 registers first.
    cluster = Cluster()
    options = LeadershipOptions(cluster.partitions, LEASE, RENEW, STAGGER, "balanced")
    started = asyncio.Event()

    async def work(leadership):
        started.set()
        await asyncio.Event().wait()

    runners = [LeaderRunner(cluster.transport(), "billing", member, work, options=options,
                            clock=cluster.clock) for member in ("worker-1", "worker-3")]
    for runner in runners:
        runner.start()
    try:
        await cluster.until(started.is_set, within=1)
        assert [runner.leading for runner in runners] == [False, True]
    finally:
        await cluster.stop_runners(*runners)


async def test_a_role_whose_members_mix_policies_is_reported_by_the_member_it_wronged(
        caplog):
    # Role "billing": worker-2 is first by registration, worker-3 first by hash.
    cluster = Cluster()
    # Balanced: the first tenure, a stagger after the registration, is in
    # order under both policies.
    first = cluster.candidate("worker-1", placement="balanced")
    await cluster.until(first.done, within=1)
    by_registration = cluster.candidate("worker-2", placement="registration")
    by_hash = cluster.candidate("worker-3", placement="balanced")
    await cluster.settle()
    caplog.set_level(logging.WARNING, "krabka.leadership")
    crash(first.result())
    # Both take their first slot at the deadline; the broker lets one win.
    await cluster.until(lambda: by_registration.done() or by_hash.done(), within=LEASE + 1)
    winner, loser, loser_policy = ((by_hash, by_registration, "registration")
                                   if by_hash.done() else
                                   (by_registration, by_hash, "balanced"))
    await cluster.advance(RENEW * 2)
    warnings = [r.getMessage() for r in caplog.records if "mix placement" in r.getMessage()]
    assert len(warnings) == 1
    assert f"before its slot at {first.result().lease.deadline + 500}" in warnings[0]
    assert f"placement {loser_policy!r}" in warnings[0]
    assert winner.result().member in warnings[0]
    # The log shows it to any reader folding with the wronged policy, never
    # to one folding with the winner's.
    transport = cluster.transport()
    seen = await describe_role_state(transport, "billing", cluster.partitions,
                                     placement=loser_policy, challenge_stagger=STAGGER)
    assert seen.out_of_order == 1
    assert seen.last_out_of_order.member == winner.result().member
    other = "balanced" if loser_policy == "registration" else "registration"
    assert (await describe_role_state(transport, "billing", cluster.partitions,
                                      placement=other, challenge_stagger=STAGGER)
            ).out_of_order == 0
    loser.cancel()


async def test_a_member_that_stands_after_a_mix_is_not_warned_of_it_again(caplog):
    cluster = Cluster()
    # Balanced: the first tenure, a stagger after the registration, is in
    # order under both policies.
    first = cluster.candidate("worker-1", placement="balanced")
    await cluster.until(first.done, within=1)
    by_registration = cluster.candidate("worker-2", placement="registration")
    by_hash = cluster.candidate("worker-3", placement="balanced")
    await cluster.settle()
    crash(first.result())
    await cluster.until(lambda: by_registration.done() or by_hash.done(), within=LEASE + 1)
    loser_policy = "registration" if by_hash.done() else "balanced"
    caplog.set_level(logging.WARNING, "krabka.leadership")
    caplog.clear()
    late = cluster.candidate("worker-5", placement=loser_policy)
    await cluster.advance(RENEW * 2)
    assert not [r for r in caplog.records if "mix placement" in r.getMessage()]
    state = await describe_role_state(cluster.transport(), "billing", cluster.partitions,
                                      placement=loser_policy, challenge_stagger=STAGGER)
    assert state.out_of_order == 1  # still shown in the role's state
    for task in (by_registration, by_hash, late):
        if not task.done():
            task.cancel()

"""The worker's rebalancing without Kafka: the hosted roles' states read from the
state topic, the live members from the group's web views, the library's
`Rebalancer` over the worker's runners (one handover at a time, only to a
live member, counted in the metrics), and ``GET /rebalance/`` gathering every
worker's plan and handovers."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from prometheus_client.parser import text_string_to_metric_families

from agents.rebalancing import (
    RoleStates,
    WorkerRebalancing,
    live_members,
    rebalance_json,
    retry_delay,
)
from agents.roles import RoleRunner
from app.factory import build
from app.settings import Settings
from krabka import STATE_TOPIC, LeaderRunner, Leadership, Move, Rebalancer, TransportError, plan
from krabka.testing import ManualClock, MemoryBroker, MemoryTransport
from tests.support.ports import free_port
from tests.support.rebalancing import vacancies
from tests.support.sim import LEASE, RENEW, STAGGER, Cluster

PARTITIONS = 4
ROLES = [f"role-{i}" for i in range(8)]
INTERVAL = STAGGER * 3


def settings(member: str, **changes) -> Settings:
    values = {"partitions": PARTITIONS, "lease_duration": LEASE, "renew_interval": RENEW,
              "challenge_stagger": STAGGER, "placement": "balanced",
              "rebalance_interval": INTERVAL, "member_id": member, "app_id": f"test-{member}",
              "web_port": free_port(), "web_host": "127.0.0.1", **changes}
    return Settings(**values)


async def work(leadership: Leadership) -> None:
    # Shielded: cancelling this function must not cancel the tenure's own future.
    await asyncio.shield(leadership.done)


class Member:
    """One worker's context with a runner per role on the in-process cluster."""

    def __init__(self, cluster: Cluster, name: str, roles: list[str] = ROLES) -> None:
        self.cluster = cluster
        self.name = name
        self.transport = cluster.transport()
        self.ctx = build(settings(name), store="memory://", roles={}, clock=cluster.clock,
                         transport_factory=lambda: self.transport)
        self.ctx.transport = self.transport
        for role in roles:
            runner = RoleRunner(self.transport, role, work, name,
                                self.ctx.settings.role_options(), clock=cluster.clock)
            self.ctx.runners[role] = runner
            runner.start()

    def held(self) -> int:
        return sum(runner.leading for runner in self.ctx.runners.values())

    def registered(self, states: RoleStates) -> bool:
        return all(self.name in states.states[role].roster for role in ROLES
                   if role in states.states)


async def stop(cluster: Cluster, *members: Member) -> None:
    runners: list[LeaderRunner] = [r for m in members for r in m.ctx.runners.values()]
    await cluster.stop_runners(*runners, within=60)


async def cancel(task: asyncio.Task) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def test_the_states_are_every_hosted_role_s_read_from_the_topic_and_kept_current():
    cluster = Cluster(partitions=PARTITIONS)
    a = Member(cluster, "a", ROLES[:3])
    outsider = Member(cluster, "outsider", ["not-hosted"])
    await cluster.until(lambda: a.held() == 3 and outsider.held() == 1, within=5)
    states = RoleStates(cluster.transport(), PARTITIONS, ROLES[:3])
    following = asyncio.create_task(states.follow(lambda failures: asyncio.sleep(0)))
    b = None
    try:
        await cluster.until(lambda: states.ready, within=5)
        # Every hosted role's state, from the records already on the topic; no other role.
        assert set(states.states) == set(ROLES[:3])
        assert all(s.lease is not None and s.lease.member == "a" for s in states.states.values())
        # A change after the read is followed: a second member registers.
        b = Member(cluster, "b", ROLES[:3])
        await cluster.until(lambda: all("b" in s.roster for s in states.states.values()),
                            within=5)
        # And renewals keep the leases current.
        deadline = states.states[ROLES[0]].lease.deadline
        await cluster.advance(RENEW * 2)
        assert states.states[ROLES[0]].lease.deadline > deadline
    finally:
        await cancel(following)
        await stop(cluster, a, outsider, *([] if b is None else [b]))


class FailingReads:
    """A state reader whose full reads raise `errors`, one per read, then read
    from `transport`."""

    def __init__(self, transport: MemoryTransport, *errors: Exception) -> None:
        self._transport = transport
        self._errors = list(errors)

    def __getattr__(self, name: str):
        return getattr(self._transport, name)

    async def read_partition(self, partition: int, from_offset: int = 0):
        if self._errors:
            raise self._errors.pop(0)
        return await self._transport.read_partition(partition, from_offset)


async def test_a_read_that_may_pass_is_retried_backing_off_until_the_states_are_in():
    cluster = Cluster(partitions=PARTITIONS)
    reader = FailingReads(cluster.transport(), *(TransportError("broker away"),) * 3)
    states = RoleStates(reader, PARTITIONS, ROLES)
    waits: list[int] = []

    async def retry(failures: int) -> None:
        waits.append(failures)

    following = asyncio.create_task(states.follow(retry))
    try:
        await cluster.until(lambda: states.ready, within=5)
        assert waits == [1, 2, 3]
    finally:
        await cancel(following)
    assert [retry_delay(n) for n in (1, 2, 3, 4, 5, 6)] == [2, 4, 8, 16, 30, 30]


async def test_a_bug_while_reading_the_states_is_raised_not_retried():
    cluster = Cluster(partitions=PARTITIONS)
    states = RoleStates(FailingReads(cluster.transport(), TypeError("a bug")), PARTITIONS,
                        ROLES)

    async def retry(failures: int) -> None:
        raise AssertionError("a bug is not retried")

    with pytest.raises(TypeError, match="a bug"):
        await states.follow(retry)
    assert not states.ready


async def test_a_bug_while_reading_the_states_ends_the_worker_s_rebalancing_loudly(caplog):
    cluster = Cluster(partitions=PARTITIONS)
    a = Member(cluster, "a", [])
    rebalancing = WorkerRebalancing(a.ctx, FailingReads(a.transport, TypeError("a bug")))
    with caplog.at_level(logging.ERROR, logger="agents.rebalancing"):
        rebalancing.start()
        tasks = list(rebalancing._tasks)
        await cluster.until(lambda: all(task.done() for task in tasks), within=5)
    assert tasks[0].exception() is not None
    assert tasks[1].cancelled(), "no plans from states no longer followed"
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "stops rebalancing" in record.getMessage()
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], TypeError)
    assert rebalance_json(a.ctx)["off"] == (
        "rebalancing: role states failed with a bug: TypeError('a bug')")
    await rebalancing.stop()  # the shutdown goes on past it


async def test_a_bug_in_a_plan_ends_the_worker_s_rebalancing_loudly(caplog):
    cluster = Cluster(partitions=PARTITIONS)
    a = Member(cluster, "a", ROLES[:2])

    async def source() -> set[str]:
        raise TypeError("a bug")

    rebalancing = WorkerRebalancing(a.ctx, a.transport, live=source)
    try:
        with caplog.at_level(logging.ERROR, logger="agents.rebalancing"):
            rebalancing.start()
            tasks = list(rebalancing._tasks)
            await cluster.until(lambda: all(task.done() for task in tasks),
                                within=INTERVAL * 3)
        assert isinstance(tasks[1].exception(), TypeError)
        assert tasks[0].cancelled(), "the states are no longer followed"
        assert [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR] == [
            "rebalancing: plans failed with a bug; member a stops rebalancing"]
        shown = rebalance_json(a.ctx)
        assert not shown["enabled"], "the web view does not show an ended rebalancing as on"
        assert shown["off"] == "rebalancing: plans failed with a bug: TypeError('a bug')"
    finally:
        await rebalancing.stop()
        await stop(cluster, a)


async def test_a_worker_over_its_share_hands_roles_one_at_a_time_to_a_live_joiner():
    cluster = Cluster(partitions=PARTITIONS)
    a = Member(cluster, "a")
    await cluster.until(lambda: a.held() == len(ROLES), within=5)
    b = Member(cluster, "b")
    live = {"a"}

    async def source() -> set[str]:
        return set(live)

    rebalancing = WorkerRebalancing(a.ctx, a.transport, live=source)
    rebalancing.start()
    try:
        await cluster.until(lambda: rebalancing.states.ready and b.registered(
            rebalancing.states), within=5)
        # b is registered but not known to be live: a keeps everything.
        await cluster.advance(INTERVAL * 3)
        assert (a.held(), b.held()) == (len(ROLES), 0)
        assert a.ctx.rebalancer is rebalancing.rebalancer
        assert rebalancing.rebalancer.last_plan.members == ("a",)
        assert rebalancing.rebalancer.moves == []
        live.add("b")
        await cluster.until(lambda: b.held() == len(ROLES) // 2, within=INTERVAL * 8)
        await cluster.advance(INTERVAL * 3)
        assert (a.held(), b.held()) == (len(ROLES) // 2, len(ROLES) // 2)  # and no further
        moves = rebalancing.rebalancer.moves
        assert len(moves) == len(ROLES) // 2
        assert {(m.giver, m.taker) for m in moves} == {("a", "b")}
        # One at a time: each handover is made once the last has landed (b's
        # lease on the state topic), not an interval later.
        found, _ = vacancies(cluster.state_records())
        landed = {vacancy.role: vacancy.since + vacancy.ms for vacancy in found
                  if vacancy.taker == "b"}
        for earlier, later in itertools.pairwise(moves):
            assert landed[earlier.role] <= later.at_ms < earlier.at_ms + INTERVAL * 1000
        assert handovers(a) == len(moves)
        last = rebalancing.rebalancer.last_plan
        assert (last.held, last.fair_share, last.moves) == ({"a": 4, "b": 4}, 4, ())
    finally:
        await rebalancing.stop()
        await stop(cluster, a, b)


async def test_no_plan_is_made_before_the_states_are_read():
    cluster = Cluster(partitions=PARTITIONS)
    a = Member(cluster, "a", [])

    async def source() -> set[str]:
        raise AssertionError("not asked before the states are read")

    rebalancing = WorkerRebalancing(a.ctx, a.transport, live=source)
    assert await rebalancing.step() is None
    assert rebalancing.rebalancer.last_plan is None


def handovers(member: Member) -> float:
    for family in text_string_to_metric_families(member.ctx.metrics.render()[0].decode()):
        if family.name == "coordination_rebalance_handovers":
            return sum(s.value for s in family.samples if s.name.endswith("_total"))
    raise AssertionError("no handover counter")


# --- over HTTP: the live members and GET /rebalance/ -----------------------------------

class StaticRouter:
    def __init__(self, owners: dict[str, list[int]], me: str) -> None:
        self._owners = owners
        self.me = me

    def owners(self) -> dict[str, list[int]]:
        return self._owners

    def is_self(self, url: str) -> bool:
        return url == self.me


class Served:
    def __init__(self, name: str, clock: ManualClock, broker: MemoryBroker, **changes) -> None:
        self.ctx = build(settings(name, **changes), store="memory://", roles={}, clock=clock,
                         transport_factory=lambda: MemoryTransport(broker))
        self.port = self.ctx.settings.web_port
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = TestServer(self.ctx.app.web.web_app, host="127.0.0.1", port=self.port)


@pytest.fixture
async def served():
    clock = ManualClock(1_700_000_000_000)
    broker = MemoryBroker(clock=clock)
    broker.create_topic(STATE_TOPIC, PARTITIONS)
    a = Served("a", clock, broker)
    b = Served("b", clock, broker)
    off = Served("c", clock, broker, placement="registration")
    gone = f"http://127.0.0.1:{free_port()}"  # a group member whose web view is down
    owners = {a.url: [0], b.url: [1], off.url: [2], gone: [3]}
    async with aiohttp.ClientSession() as session:
        for worker in (a, b, off):
            worker.ctx.router = StaticRouter(owners, worker.url)
            worker.ctx.http = session
            await worker.server.start_server()
        yield a, b, off, session
        for worker in (a, b, off):
            await worker.server.close()


async def test_the_live_members_are_the_group_s_workers_whose_web_view_answers(served):
    a, b, _, _ = served
    assert await live_members(a.ctx) == {"a", "b", "c"}
    await b.server.close()
    assert await live_members(a.ctx) == {"a", "c"}


async def test_rebalance_shows_each_worker_s_plan_and_the_handovers_of_all(served):
    a, b, off, session = served
    for worker, at in ((a, 2000), (b, 1000)):
        rebalancer = Rebalancer(worker.ctx.member, {}, dict, set, worker.ctx.clock)
        rebalancer.last_plan = plan({}, worker.ctx.member, {"a", "b"}, at)
        rebalancer.moves = [Move(f"role-{worker.ctx.member}", worker.ctx.member, "z",
                                 "over the fair share", at)]
        worker.ctx.rebalancer = rebalancer
    async with session.get(f"{a.url}/rebalance/?scope=local") as response:
        assert response.status == 200
        local = await response.json()
    assert local == {
        "member": "a", "enabled": True, "off": None, "interval": INTERVAL,
        "plan": {"member": "a", "at": 2000, "roles": 0, "hosted": 0, "members": ["a", "b"],
                 "fair_share": 0, "held": {"a": 0, "b": 0}, "moves": [], "standing": []},
        "moves": [{"role": "role-a", "from": "a", "to": "z", "reason": "over the fair share",
                   "at": 2000}],
    }
    async with session.get(f"{b.url}/rebalance/") as response:
        assert response.status == 200
        gathered = await response.json()
    assert [w["member"] for w in gathered["workers"]] == ["a", "b", "c"]
    assert gathered["workers"][2] == {
        "member": "c", "enabled": False, "interval": INTERVAL, "plan": None, "moves": [],
        "off": "COORDINATION_PLACEMENT is registration, not balanced"}
    assert [m["role"] for m in gathered["moves"]] == ["role-b", "role-a"]  # oldest first
    assert [u["worker"] for u in gathered["unavailable"]] == [
        url for url in a.ctx.router.owners() if url not in (a.url, b.url, off.url)]


async def test_the_dashboard_shows_the_rebalancing_from_the_endpoint(served):
    a, _, _, session = served
    async with session.get(f"{a.url}/") as response:
        page = await response.text()
    assert 'fetch("/rebalance/"' in page
    assert 'id="moves"' in page
    assert 'id="plans"' in page

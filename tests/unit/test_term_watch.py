"""Term-mode leadership events: what a terms record changed (`TermFold.apply`),
the fold of every role of a partition, the events it becomes, and
`watch_term_events` following the terms topic (docs/events.md#term-mode)."""

from __future__ import annotations

import asyncio

import pytest

from krabka import (
    StateTopicError,
    TermElected,
    TermPartitionFold,
    TermResigned,
    TermToken,
    role_partition,
    watch_term_events,
)
from krabka.observe.events import LeadershipEvent, describe, term_change_event
from krabka.term.fold import TermClaim, TermFold
from krabka.testing import MemoryTransport
from tests.support.sim import LEASE, Cluster, crash
from tests.support.term_logs import TermLog
from tests.unit.test_term_leadership import TERM, lead

# --- what a record changed --------------------------------------------------------------


def changes(log: TermLog, role: str = "r") -> list:
    fold = TermFold(role)
    return [fold.apply(record) for record in log.records]


def test_a_winning_claim_is_an_election_naming_the_previous_term():
    log = TermLog()
    log.claim("r", "a", 1)
    log.resign("r", "a", 1)
    log.claim("r", "b", 2)
    first, _, second = changes(log)
    assert first == TermElected(TermClaim("a", 1, 0, 0), None, False)
    assert second == TermElected(TermClaim("b", 2, 2, 2000), TermClaim("a", 1, 0, 0), True)


def test_a_resign_is_reported_once_and_a_renewal_or_a_losing_claim_is_no_change():
    log = TermLog()
    log.claim("r", "a", 1)
    log.heartbeat("r", "a", 1)
    log.claim("r", "b", 1)
    log.resign("r", "a", 1)
    log.resign("r", "a", 1)
    assert changes(log)[1:] == [None, None, TermResigned(TermClaim("a", 1, 0, 0), 3, 3000), None]


def test_the_latest_sign_of_life_carries_its_record_timestamp():
    log = TermLog()
    log.claim("r", "a", 1)
    log.heartbeat("r", "a", 1)
    fold = TermFold("r")
    for record in log.records:
        fold.apply(record)
    assert (fold.view.sign_offset, fold.view.sign_timestamp) == (1, 1000)


def test_a_partition_fold_keeps_one_view_per_role_and_lists_the_undecodable_once():
    partitions = 4
    here = [f"r{n}" for n in range(100) if role_partition(f"r{n}", partitions) == 1][:2]
    stray = next(f"s{n}" for n in range(100) if role_partition(f"s{n}", partitions) != 1)
    log = TermLog()
    log.claim(here[0], "a", 1)
    log.add(b"not a key", b"x")
    log.claim(stray, "a", 5)
    log.claim(here[1], "b", 2)
    fold = TermPartitionFold(1, partitions)
    applied = [fold.apply(record) for record in log.records]
    assert [None if a is None else a[0] for a in applied] == [here[0], None, None, here[1]]
    assert {role: view.holder for role, view in fold.views.items()} == {here[0]: "a",
                                                                         here[1]: "b"}
    assert [offset for offset, _ in fold.errors] == [1]
    assert fold.misplaced == 1
    assert all(not view.errors for view in fold.views.values())


def test_a_partition_fold_of_a_partition_out_of_range_is_refused():
    with pytest.raises(ValueError, match="partition"):
        TermPartitionFold(4, 4)


# --- the events they become -------------------------------------------------------------


def test_an_election_event_has_the_term_as_its_token_and_names_the_previous_holder():
    change = TermElected(TermClaim("b", 2, 7, 1_700_000_000_000), TermClaim("a", 1, 3, 0), False)
    body = term_change_event("billing", 5, change).to_json()
    assert {k: body[k] for k in ("kind", "member", "token", "tenure", "granted_at",
                                 "deadline", "previous_holder", "previous_token", "rank",
                                 "partition", "offset", "timestamp")} == {
        "kind": "elected", "member": "b", "token": {"term": 2}, "tenure": 7,
        "granted_at": 1_700_000_000_000, "deadline": None, "previous_holder": "a",
        "previous_token": {"term": 1}, "rank": None, "partition": 5, "offset": 7,
        "timestamp": 1_700_000_000_000}
    assert "b leads 'billing' (term 2, after a)" in describe(body)


def test_a_resign_event_is_located_at_the_resign_and_names_the_resigned_term():
    change = TermResigned(TermClaim("a", 1, 3, 1000), 9, 5000)
    event = term_change_event("billing", 0, change)
    assert (event.kind, event.member, event.token, event.tenure) == (
        "resigned", "a", TermToken(1), 3)
    assert (event.offset, event.timestamp) == (9, 5000)
    assert "a resigned 'billing' (term 1)" in describe(event.to_json())


def test_an_epoch_events_line_is_unchanged():
    line = describe({"kind": "elected", "role": "r", "member": "a", "timestamp": 0,
                     "token": {"producer_id": 4000, "producer_epoch": 7}})
    assert line.endswith("a leads 'r' (token 4000/7)")


# --- watch_term_events ------------------------------------------------------------------


class TermWatcher:
    """`watch_term_events` running in a task, collecting what it hands over."""

    def __init__(self, transport: MemoryTransport, partitions: int, **options) -> None:
        self.events: list[LeadershipEvent] = []
        self._grew = asyncio.Event()
        self._following = asyncio.Event()
        self.task = asyncio.ensure_future(watch_term_events(
            transport, partitions, self._emit, following=self._following.set, **options))

    def _emit(self, event: LeadershipEvent) -> None:
        self.events.append(event)
        self._grew.set()

    async def following(self, cluster: Cluster) -> None:
        await cluster.until(self._following.is_set, within=1)

    async def until(self, cluster: Cluster, count: int) -> list[tuple[str, str, str | None]]:
        """The first `count` events as (role, kind, member), within 10 s of clock time."""
        await cluster.until(lambda: len(self.events) >= count, within=10)
        return [(e.role, e.kind, e.member) for e in self.events]

    async def stop(self) -> None:
        self.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self.task


async def test_watch_reports_elections_with_the_previous_holder_and_resigns():
    cluster = Cluster()
    watcher = TermWatcher(cluster.transport(), cluster.partitions)
    await watcher.following(cluster)
    first = await lead(cluster, "a")
    successor = cluster.candidate("b", **TERM)
    await cluster.settle()
    crash(first)
    await cluster.until(successor.done, within=LEASE * 2)
    await successor.result().resign()
    assert await watcher.until(cluster, 3) == [("billing", "elected", "a"),
                                               ("billing", "elected", "b"),
                                               ("billing", "resigned", "b")]
    elected = watcher.events[1]
    assert (elected.token, elected.previous_holder, elected.previous_token) == (
        TermToken(2), "a", TermToken(1))
    assert elected.tenure == successor.result().tenure
    assert elected.partition == role_partition("billing", cluster.partitions)
    await cluster.advance(LEASE * 2)  # heartbeats are no events
    assert len(watcher.events) == 3
    await watcher.stop()


async def test_watch_reports_only_what_follows_it_unless_asked_for_the_history():
    cluster = Cluster()
    earlier = await lead(cluster, "a")
    await earlier.resign()
    now = TermWatcher(cluster.transport(), cluster.partitions)
    history = TermWatcher(cluster.transport(), cluster.partitions, from_beginning=True)
    await now.following(cluster)
    assert await history.until(cluster, 2) == [("billing", "elected", "a"),
                                               ("billing", "resigned", "a")]
    assert now.events == []
    await now.stop()
    await history.stop()


async def test_watch_with_roles_reports_only_those():
    cluster = Cluster()
    watcher = TermWatcher(cluster.transport(), cluster.partitions, roles=["billing"])
    await watcher.following(cluster)
    other = await lead(cluster, "x", role="other")
    billing = await lead(cluster, "a")
    await other.resign()
    await billing.resign()
    assert await watcher.until(cluster, 2) == [("billing", "elected", "a"),
                                               ("billing", "resigned", "a")]
    await cluster.advance(1)
    assert len(watcher.events) == 2
    await watcher.stop()


async def test_watch_with_a_wrong_partition_count_is_refused():
    cluster = Cluster()
    with pytest.raises(StateTopicError, match="partitions"):
        await watch_term_events(cluster.transport(), cluster.partitions * 2, print)


async def test_watch_refuses_a_string_for_its_roles():
    with pytest.raises(ValueError, match="collection"):
        await watch_term_events(Cluster().transport(), 4, print, roles="billing")


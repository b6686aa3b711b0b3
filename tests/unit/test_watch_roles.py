"""Watchers on the in-process model, with time driven by hand.

A watcher (`watch_roles`) reports every state change committed after its
start point, in offset order per partition, each with the state the role's
fold gives after it; it needs only a `StateReader`, so it writes nothing and
appears in no roster; it can resume from where another stopped without a gap
or a repeat. The CLI's ``watch`` is covered in test_operator_views.py and on
the real broker in tests/kafka/test_watch_kafka.py.
"""

from __future__ import annotations

import asyncio

import pytest

from krabka import FormatError, RoleChange, StateTopicError, describe_roles, watch_roles
from krabka.defaults import STATE_TOPIC
from krabka.format.partition import role_partition
from krabka.format.records import decode_key, encode_key, registration_key
from krabka.observe.watch import RoleWatch
from krabka.rules.changes import Elected, Joined, Renewed
from krabka.rules.fold import RoleFold, build_role_state
from krabka.transport import PartitionRead, PartitionTail, TopicCheck, TopicFacts
from tests.support.sim import Cluster, crash

PARTITIONS = 4
MEMBERS = {"a", "b", "c", "d"}


class ReadOnly:
    """Only the `StateReader` methods of a client: a watcher given this cannot write."""

    def __init__(self, reader) -> None:
        self._reader = reader
        self.tails_open = 0

    async def read_partition(self, partition: int, from_offset: int = 0) -> PartitionRead:
        return await self._reader.read_partition(partition, from_offset)

    async def tail(self, partition: int, from_offset: int, *,
                   role: str | None = None) -> PartitionTail:
        self.tails_open += 1
        return _CountedTail(self, await self._reader.tail(partition, from_offset, role=role))

    async def topic_facts(self) -> TopicFacts:
        return await self._reader.topic_facts()

    async def check_topic(self, partitions: int, lease_duration: float | None) -> TopicCheck:
        return await self._reader.check_topic(partitions, lease_duration)


class _CountedTail:
    def __init__(self, owner: ReadOnly, tail: PartitionTail) -> None:
        self._owner = owner
        self._tail = tail

    async def next(self) -> PartitionRead:
        return await self._tail.next()

    def returned_to(self) -> int:
        return self._tail.returned_to()

    async def close(self) -> None:
        self._owner.tails_open -= 1
        await self._tail.close()


class Collector:
    """Iterates a started watch in a task, keeping every change."""

    def __init__(self, watch: RoleWatch) -> None:
        self.changes: list[RoleChange] = []
        self.task = asyncio.ensure_future(self._run(watch))

    async def _run(self, watch: RoleWatch) -> None:
        async for change in watch:
            self.changes.append(change)

    async def stop(self) -> None:
        self.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self.task


def _roles_of(partition: int, count: int) -> list[str]:
    return [f"r{i}" for i in range(200) if role_partition(f"r{i}", PARTITIONS) == partition][:count]


def refold(cluster: Cluster, starts: dict[int, int], roles: frozenset[str] = frozenset()):
    """The changes at or after `starts` (per partition), from a fold of the whole log:
    (role, partition, offset, change, state after it), in offset order per partition."""
    out = []
    for partition in range(PARTITIONS):
        folds: dict[str, RoleFold] = {}
        for record in cluster.broker.partition(STATE_TOPIC, partition).read_committed(0).records:
            try:
                role = decode_key(record.key).role
            except FormatError:
                continue
            if role_partition(role, PARTITIONS) != partition or (roles and role not in roles):
                continue
            fold = folds.setdefault(role, RoleFold(role))
            change = fold.apply(record)
            if change is not None and record.offset >= starts.get(partition, 0):
                out.append((role, partition, record.offset, change, fold.snapshot()))
    return out


def as_tuples(changes: list[RoleChange]):
    return [(c.role, c.partition, c.offset, c.change, c.state) for c in changes]


def by_partition(rows):
    """Rows grouped per partition, each group in the order given."""
    return {p: [row for row in rows if row[1] == p] for p in range(PARTITIONS)}


async def _history(cluster: Cluster):
    """a leads billing with b standing by, c leads reports; some renewals."""
    a = cluster.candidate("a", "billing")
    await cluster.until(a.done, within=1)
    b = cluster.candidate("b", "billing")
    c = cluster.candidate("c", "reports")
    await cluster.until(c.done, within=1)
    await cluster.advance(2.5)  # renewals of both holders
    return a.result(), b, c.result()


async def test_a_watcher_started_mid_history_sees_every_later_change_in_order(cluster):
    billing_a, b_task, reports_c = await _history(cluster)
    reader = ReadOnly(cluster.transport())
    async with watch_roles(reader, PARTITIONS) as watch:
        start = watch.positions
        assert set(start) == set(range(PARTITIONS))
        assert start == {p: cluster.broker.partition(STATE_TOPIC, p).last_stable_offset()
                         for p in range(PARTITIONS)}
        collector = Collector(watch)
        await cluster.advance(1.5)  # more renewals
        crash(billing_a)  # a's lease lapses; b takes over after its stagger
        await cluster.until(b_task.done, within=10)
        await reports_c.resign()
        d = cluster.candidate("d", "audit")
        await cluster.until(d.done, within=1)
        await cluster.advance(1.5)
        expected = refold(cluster, start)
        await cluster.until(lambda: len(collector.changes) >= len(expected), within=1)
        await cluster.settle()
        await collector.stop()
    got = as_tuples(collector.changes)
    # Every change after the start, nothing before it, each with the fold's state,
    # in offset order within each partition.
    assert by_partition(got) == by_partition(expected)
    assert len(got) == len(expected)
    for partition, rows in by_partition(got).items():
        offsets = [row[2] for row in rows]
        assert offsets == sorted(offsets)
        assert all(offset >= start[partition] for offset in offsets)
    # What happened, read as events: a renewal is a change but no event.
    events = [(c.role, c.event.kind, c.event.member) for c in collector.changes if c.event]
    # b takes over, and deregisters a, whose slot passed unused.
    assert [e for e in events if e[0] == "billing"] == [("billing", "elected", "b"),
                                                         ("billing", "member-left", "a")]
    assert [e for e in events if e[0] == "reports"] == [("reports", "resigned", "c"),
                                                         ("reports", "member-left", "c")]
    assert [e for e in events if e[0] == "audit"] == [("audit", "member-joined", "d"),
                                                       ("audit", "elected", "d")]
    assert any(isinstance(c.change, Renewed) for c in collector.changes)
    takeover = next(c for c in collector.changes if isinstance(c.change, Elected))
    assert takeover.event is not None
    assert takeover.event.previous_holder == "a"
    # The watcher is in no roster: not in any state it reported, not in the log's.
    for change in collector.changes:
        assert set(change.state.roster) <= MEMBERS
    for state in await describe_roles(cluster.transport(), PARTITIONS):
        assert set(state.roster) <= MEMBERS
    assert reader.tails_open == 0  # leaving the watch closed its tails
    await d.result().resign()
    await b_task.result().resign()


async def test_from_the_beginning_a_watch_reports_the_whole_log(cluster):
    billing_a, b_task, reports_c = await _history(cluster)
    async with watch_roles(cluster.transport(), PARTITIONS, since="beginning") as watch:
        collector = Collector(watch)
        await reports_c.resign()
        expected = refold(cluster, {})
        await cluster.until(lambda: len(collector.changes) >= len(expected), within=1)
        await collector.stop()
    assert by_partition(as_tuples(collector.changes)) == by_partition(expected)
    first = collector.changes[0]
    assert isinstance(first.change, Joined)
    last = {c.role: c.state for c in collector.changes}
    for role, state in last.items():
        log = cluster.broker.partition(STATE_TOPIC, role_partition(role, PARTITIONS))
        assert state == build_role_state(role, log.read_committed(0).records)
    await billing_a.resign()
    b_task.cancel()


async def test_a_watch_resumed_from_positions_misses_and_repeats_nothing(cluster):
    billing_a, b_task, reports_c = await _history(cluster)
    async with watch_roles(cluster.transport(), PARTITIONS, since="beginning") as first:
        seen = [await anext(first) for _ in range(3)]  # stops part-way through the log
        resume = first.positions
    await reports_c.resign()
    async with watch_roles(cluster.transport(), PARTITIONS, since=resume) as second:
        collector = Collector(second)
        expected = refold(cluster, {})
        await cluster.until(lambda: len(seen) + len(collector.changes) >= len(expected),
                            within=1)
        await cluster.settle()
        await collector.stop()
    together = by_partition(as_tuples(seen) + as_tuples(collector.changes))
    assert together == by_partition(expected)
    await billing_a.resign()
    b_task.cancel()


async def test_a_watch_from_an_offset_not_written_yet_reports_from_that_offset(cluster):
    home = role_partition("billing", PARTITIONS)
    end = cluster.broker.partition(STATE_TOPIC, home).last_stable_offset()
    start = {home: end + 1}  # the candidate's registration is at `end`: folded, not reported
    async with watch_roles(cluster.transport(), PARTITIONS, roles=["billing"],
                           since=start) as watch:
        collector = Collector(watch)
        a = cluster.candidate("a", "billing")
        await cluster.until(a.done, within=1)
        expected = refold(cluster, start, frozenset({"billing"}))
        await cluster.until(lambda: len(collector.changes) >= len(expected), within=1)
        await cluster.settle()
        await collector.stop()
    assert as_tuples(collector.changes) == expected
    assert [type(c.change).__name__ for c in collector.changes] == ["Elected"]
    assert collector.changes[0].state.roster == ["a"]  # the registration was folded
    await a.result().resign()


async def test_a_watch_of_some_roles_reports_only_theirs_and_reads_only_their_partitions(
        cluster):
    billing_a, b_task, reports_c = await _history(cluster)
    reader = ReadOnly(cluster.transport())
    watch = watch_roles(reader, PARTITIONS, roles=["reports"])
    assert watch.partitions == [role_partition("reports", PARTITIONS)]
    async with watch:
        assert reader.tails_open == 1
        start = watch.positions
        collector = Collector(watch)
        await billing_a.resign()  # another role's changes: not reported
        await reports_c.resign()
        expected = refold(cluster, start, frozenset({"reports"}))
        await cluster.until(lambda: len(collector.changes) >= len(expected), within=1)
        await cluster.settle()
        await collector.stop()
    assert as_tuples(collector.changes) == expected
    assert {c.role for c in collector.changes} == {"reports"}
    b_task.cancel()


async def test_records_that_name_no_role_of_their_partition_are_no_change(cluster):
    home = role_partition("billing", PARTITIONS)
    async with watch_roles(cluster.transport(), PARTITIONS) as watch:
        collector = Collector(watch)
        transport = cluster.transport()
        await transport.append(home, b"\xde\xad garbage key", b"x")
        stranger = _roles_of((home + 1) % PARTITIONS, 1)[0]
        await transport.append(home, encode_key(registration_key(stranger, "x")), b"")
        a = cluster.candidate("a", "billing")
        await cluster.until(a.done, within=1)
        await cluster.until(lambda: len(collector.changes) >= 2, within=1)
        await cluster.settle()
        await collector.stop()
    assert [(c.role, type(c.change).__name__) for c in collector.changes] == [
        ("billing", "Joined"), ("billing", "Elected")]
    await a.result().resign()


async def test_a_started_watch_iterates_no_further_once_closed(cluster):
    watch = watch_roles(cluster.transport(), PARTITIONS)
    await watch.start()
    await watch.aclose()
    with pytest.raises(StopAsyncIteration):
        await anext(watch)
    await watch.aclose()  # idempotent


@pytest.mark.parametrize(("arguments", "message"), [
    ({"since": "yesterday"}, "since is 'now', 'beginning' or a mapping"),
    ({"since": {PARTITIONS: 0}}, "outside 0..3"),
    ({"since": {0: -1}}, "negative offset"),
    ({"roles": "billing"}, "not the string"),
])
def test_bad_arguments_are_refused_at_once(cluster, arguments, message):
    with pytest.raises(ValueError, match=message):
        watch_roles(cluster.transport(), PARTITIONS, **arguments)


def test_no_partitions_is_refused(cluster):
    with pytest.raises(ValueError, match="at least 1"):
        watch_roles(cluster.transport(), 0)


async def test_a_wrong_partition_count_is_refused_at_the_start(cluster):
    with pytest.raises(StateTopicError, match="partitions"):
        async with watch_roles(cluster.transport(), PARTITIONS * 2):
            pass


@pytest.fixture
def cluster() -> Cluster:
    return Cluster(PARTITIONS)

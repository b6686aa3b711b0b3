"""What the operator CLI reads, on the in-process model: every role of the
state topic (`describe_roles`) and the leadership events as they are
committed (`watch_events`). The commands themselves run against the real
broker in tests/kafka/test_cli.py."""

from __future__ import annotations

import asyncio

import pytest

from krabka import (
    STATE_TOPIC,
    Registration,
    StateTopicError,
    acquire_leadership,
    describe_role_state,
    describe_roles,
    encode_key,
    encode_registration,
    registration_key,
    role_partition,
)
from krabka.observe.events import LeadershipEvent
from krabka.observe.watch import watch_events
from krabka.testing import ManualClock, MemoryBroker, MemoryTransport
from tests.support.polling import eventually

PARTITIONS = 4


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def transport(clock: ManualClock) -> MemoryTransport:
    broker = MemoryBroker(clock=clock)
    broker.create_topic(STATE_TOPIC, PARTITIONS)
    return MemoryTransport(broker)


async def _lead(transport: MemoryTransport, clock: ManualClock, role: str, member: str):
    return await acquire_leadership(transport, role, member, partitions=PARTITIONS,
                                    lease_duration=3, renew_interval=1, challenge_stagger=0.5,
                                    clock=clock)


async def _register(transport: MemoryTransport, role: str, member: str) -> None:
    await transport.append(role_partition(role, PARTITIONS),
                           encode_key(registration_key(role, member)),
                           encode_registration(Registration(member, 0)))


def _elsewhere(partition: int) -> str:
    """A role whose records belong to another partition than `partition`."""
    return next(f"m{i}" for i in range(100) if role_partition(f"m{i}", PARTITIONS) != partition)


def _beside(role: str) -> str:
    """Another role whose records share `role`'s partition."""
    home = role_partition(role, PARTITIONS)
    return next(f"n{i}" for i in range(100) if role_partition(f"n{i}", PARTITIONS) == home)


# --- describe_roles --------------------------------------------------------------------


async def test_every_role_is_listed_once_by_name_as_its_own_state_reads(transport, clock):
    leadership = await _lead(transport, clock, "billing", "a")
    await _register(transport, "reports", "b")  # a role whose member never led
    home = role_partition("billing", PARTITIONS)
    await transport.append(home, b"\xde\xad garbage key", b"x")
    # A record of another partition's role, read from billing's: no role of its own here.
    await transport.append(home, encode_key(registration_key(_elsewhere(home), "x")), b"")
    late = _beside("billing")  # first seen after the garbage, which it lists too
    await _register(transport, late, "c")

    states = await describe_roles(transport, PARTITIONS)

    assert [state.role for state in states] == sorted(["billing", "reports", late])
    for state in states:
        assert state == await describe_role_state(transport, state.role, PARTITIONS)
    listed = {state.role: state for state in states}
    billing = listed["billing"]
    assert billing.holder == "a"
    assert billing.token == leadership.token
    assert billing.skipped == listed[late].skipped == 1
    assert billing.misplaced == listed[late].misplaced == 1
    assert listed["reports"].holder is None
    assert listed["reports"].roster == ["b"]
    await leadership.resign()


async def test_roles_of_an_empty_state_topic_are_none(transport):
    assert await describe_roles(transport, PARTITIONS) == []


async def test_roles_with_a_wrong_partition_count_are_refused(transport):
    with pytest.raises(StateTopicError, match="partitions"):
        await describe_roles(transport, PARTITIONS * 2)


# --- watch_events ----------------------------------------------------------------------


class Watcher:
    """`watch_events` running in a task, collecting what it hands over."""

    def __init__(self, transport: MemoryTransport, **options) -> None:
        self.events: list[LeadershipEvent] = []
        self._grew = asyncio.Event()
        self._following = asyncio.Event()
        self.task = asyncio.ensure_future(watch_events(
            transport, PARTITIONS, self._emit, following=self._following.set, **options))

    def _emit(self, event: LeadershipEvent) -> None:
        self.events.append(event)
        self._grew.set()

    async def following(self) -> None:
        await asyncio.wait_for(self._following.wait(), 5)

    async def until(self, count: int) -> list[tuple[str, str, str | None]]:
        """The first `count` events as (role, kind, member), within 5 s."""
        async with asyncio.timeout(5):
            while len(self.events) < count:
                self._grew.clear()
                await self._grew.wait()
        return [(e.role, e.kind, e.member) for e in self.events]

    async def stop(self) -> None:
        self.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self.task


async def test_watch_reports_each_change_committed_after_it_started(transport, clock):
    earlier = await _lead(transport, clock, "earlier", "a")  # before the watch: not reported
    watcher = Watcher(transport)
    await watcher.following()
    leadership = await _lead(transport, clock, "billing", "a")
    await leadership.resign()
    await _register(transport, "reports", "b")
    assert await watcher.until(5) == [
        ("billing", "member-joined", "a"),
        ("billing", "elected", "a"),
        ("billing", "resigned", "a"),
        ("billing", "member-left", "a"),
        ("reports", "member-joined", "b"),
    ]
    elected = watcher.events[1]
    assert elected.token == leadership.token
    assert elected.tenure == leadership.tenure
    assert elected.partition == role_partition("billing", PARTITIONS)
    await watcher.stop()
    await earlier.resign()


async def test_watch_with_roles_reports_only_those(transport, clock):
    watcher = Watcher(transport, roles=["billing"])
    await watcher.following()
    other = await _lead(transport, clock, "other", "x")
    leadership = await _lead(transport, clock, "billing", "a")
    assert await watcher.until(2) == [("billing", "member-joined", "a"),
                                      ("billing", "elected", "a")]
    await other.resign()
    await leadership.resign()
    assert (await watcher.until(4))[2:] == [("billing", "resigned", "a"),
                                            ("billing", "member-left", "a")]
    await watcher.stop()


async def test_watch_from_the_beginning_reports_the_history_first(transport, clock):
    leadership = await _lead(transport, clock, "billing", "a")
    await leadership.resign()
    watcher = Watcher(transport, from_beginning=True)
    assert await watcher.until(4) == [("billing", "member-joined", "a"),
                                      ("billing", "elected", "a"),
                                      ("billing", "resigned", "a"),
                                      ("billing", "member-left", "a")]
    await watcher.stop()


async def test_a_renewal_is_no_event_and_a_new_holder_names_the_previous(transport, clock):
    watcher = Watcher(transport)
    await watcher.following()
    first = await _lead(transport, clock, "billing", "a")
    def billing():
        return describe_role_state(transport, "billing", PARTITIONS)

    granted = (await billing()).lease.granted_at
    clock.advance(1)  # the renew interval: the holder writes its lease again
    await eventually(billing, lambda state: state.lease.granted_at > granted, 5)
    await first.resign(deregister=False)
    second = await _lead(transport, clock, "billing", "b")
    assert await watcher.until(5) == [("billing", "member-joined", "a"),
                                      ("billing", "elected", "a"),
                                      ("billing", "resigned", "a"),
                                      ("billing", "member-joined", "b"),
                                      ("billing", "elected", "b")]
    assert watcher.events[-1].previous_holder == "a"
    await watcher.stop()
    await second.resign()

"""Settling the heap: one full collection, then later collections skip what survived it."""

import asyncio
import gc
import weakref

import pytest

from coordination import ManualClock
from coordination.heap import HeapSettler, settle_heap
from tests.support.loop import run_ready_callbacks


class Cycle:
    """An object that only the cycle collector frees: it refers to itself."""

    def __init__(self) -> None:
        self.me = self


def test_settling_freezes_what_survives_so_collections_skip_it():
    survivor = Cycle()
    frozen = settle_heap()
    assert frozen == gc.get_freeze_count() > 0
    alive = weakref.ref(survivor)
    del survivor
    gc.collect()
    assert alive() is not None, "a collection walked the frozen object"


def test_a_settle_frees_what_an_earlier_settle_froze_and_is_now_garbage():
    released = Cycle()
    settle_heap()
    alive = weakref.ref(released)
    del released
    settle_heap()
    assert alive() is None


class Held:
    """What a process holds, as `HeapSettler` reads it, and the settles it caused."""

    def __init__(self, clock: ManualClock) -> None:
        self.roles: set[str] = set()
        self.settled: list[frozenset[str]] = []
        self.settler = HeapSettler(lambda: frozenset(self.roles), quiet_ms=1_000,
                                   clock=clock, settle=self.settle)

    def settle(self) -> int:
        self.settled.append(frozenset(self.roles))
        return 0


async def elapse(clock: ManualClock, ms: int) -> None:
    await run_ready_callbacks()
    clock.advance_ms(ms)
    await run_ready_callbacks()


async def test_the_heap_settles_once_the_held_roles_stop_changing():
    clock = ManualClock()
    held = Held(clock)
    task = asyncio.create_task(held.settler.run())
    await run_ready_callbacks()
    try:
        held.roles.add("a")
        await elapse(clock, 1_000)
        held.roles.add("b")
        await elapse(clock, 1_000)
        assert held.settled == [], "settled while the roles were still changing"
        await elapse(clock, 1_000)
        assert held.settled == [frozenset({"a", "b"})]
        await elapse(clock, 5_000)
        assert len(held.settled) == 1, "settled again with nothing changed"
    finally:
        task.cancel()


async def test_a_role_changing_hands_settles_the_heap_again():
    clock = ManualClock()
    held = Held(clock)
    held.roles.add("a")
    task = asyncio.create_task(held.settler.run())
    try:
        await elapse(clock, 1_000)
        held.roles.discard("a")
        held.roles.add("b")
        await elapse(clock, 1_000)
        await elapse(clock, 1_000)
        assert held.settled == [frozenset({"a"}), frozenset({"b"})]
    finally:
        task.cancel()


def test_a_settler_needs_a_positive_quiet_time():
    with pytest.raises(ValueError, match="quiet_ms"):
        HeapSettler(lambda: 0, quiet_ms=0)

"""Settling and freezing the heap: later collections skip what survived; a freeze walks
only what is new, a full settle also frees what was frozen and has died since."""

import asyncio
import contextlib
import gc
import weakref
from collections.abc import AsyncIterator

import pytest

from krabka.scale.heap import (
    OLDEST_THRESHOLD,
    HeapSettler,
    HeapState,
    freeze_new,
    settle_heap,
)
from krabka.testing import ManualClock
from tests.support.loop import run_ready_callbacks


class Cycle:
    """An object that only the cycle collector frees: it refers to itself."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture(autouse=True)
def thresholds():
    """The collector's thresholds as the test found them, put back after it: a
    freeze or a settle changes them for the whole process."""
    found = gc.get_threshold()
    yield found
    gc.set_threshold(*found)


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


def test_a_freeze_frees_new_garbage_and_keeps_what_it_froze_before_until_a_full_settle():
    settle_heap()
    kept = Cycle()
    freeze_new()
    kept_alive = weakref.ref(kept)
    del kept
    new = Cycle()
    new_alive = weakref.ref(new)
    del new
    freeze_new()
    assert new_alive() is None, "a freeze did not collect what was new"
    assert kept_alive() is not None, "a freeze walked what an earlier freeze froze"
    settle_heap()
    assert kept_alive() is None, "a full settle did not free what a freeze kept"


def test_a_frozen_heap_spaces_the_full_collections_by_its_size(thresholds):
    first, second, _ = thresholds
    long_lived = [[i] for i in range(600_000)]  # tracked objects, kept alive
    frozen = freeze_new()
    assert frozen > 600_000
    assert gc.get_threshold() == (first, second, frozen // (4 * first * second))
    assert gc.get_threshold()[2] > OLDEST_THRESHOLD
    del long_lived
    settle_heap()
    assert gc.get_threshold() == (first, second, max(
        OLDEST_THRESHOLD, gc.get_freeze_count() // (4 * first * second)))
    assert gc.get_threshold()[2] < frozen // (4 * first * second), \
        "a settle that freed most of the heap kept full collections as rare"


class Held:
    """What a process holds, as `HeapSettler` reads it, and what the settler did."""

    def __init__(self, clock: ManualClock) -> None:
        self.roles: set[str] = set()
        self.done: list[tuple[str, frozenset[str]]] = []
        self.settler = HeapSettler(lambda: frozenset(self.roles), quiet_ms=1_000,
                                   clock=clock, settle=self.settle, freeze=self.freeze)

    def settle(self) -> int:
        self.done.append(("settle", frozenset(self.roles)))
        return 0

    def freeze(self) -> int:
        self.done.append(("freeze", frozenset(self.roles)))
        return 0


@contextlib.asynccontextmanager
async def running(settler: HeapSettler) -> AsyncIterator[None]:
    """`settler.run()` for the block, stopped after it: a settler left running
    would keep its collector hook for the rest of the test session."""
    task = asyncio.create_task(settler.run())
    await run_ready_callbacks()
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def elapse(clock: ManualClock, ms: int) -> None:
    await run_ready_callbacks()
    clock.advance_ms(ms)
    await run_ready_callbacks()


async def test_while_the_held_roles_only_grow_the_heap_is_frozen_each_quiet_period():
    clock = ManualClock()
    held = Held(clock)
    async with running(held.settler):
        held.roles.add("a")
        await elapse(clock, 1_000)
        held.roles.add("b")
        await elapse(clock, 1_000)
        assert held.done == [("freeze", frozenset({"a"})), ("freeze", frozenset({"a", "b"}))]
        await elapse(clock, 5_000)
        assert len(held.done) == 2, "acted again with nothing changed"


async def test_a_role_let_go_settles_in_full_once_the_held_roles_stop_changing():
    clock = ManualClock()
    held = Held(clock)
    held.roles.update({"a", "b"})
    async with running(held.settler):
        await elapse(clock, 1_000)
        assert held.settler.state is HeapState.GROWING
        held.roles.discard("a")
        await elapse(clock, 1_000)
        assert held.settler.state is HeapState.CHANGED
        held.roles.add("c")
        await elapse(clock, 1_000)
        assert held.done == [("freeze", frozenset({"a", "b"}))], \
            "settled while the roles were still changing"
        await elapse(clock, 1_000)
        assert held.done[1:] == [("settle", frozenset({"b", "c"}))]
        assert held.settler.state is HeapState.STEADY
        held.roles.add("d")
        await elapse(clock, 1_000)
        assert held.done[2:] == [("freeze", frozenset({"b", "c", "d"}))]
        assert held.settler.state is HeapState.GROWING


async def test_what_is_held_but_not_a_set_settles_in_full_once_it_stops_changing():
    clock = ManualClock()
    count = [1]
    settles: list[int] = []
    settler = HeapSettler(lambda: count[0], quiet_ms=1_000, clock=clock,
                          settle=lambda: settles.append(count[0]) or 0,
                          freeze=lambda: pytest.fail("froze on a value that is not a set"))
    async with running(settler):
        await elapse(clock, 1_000)
        count[0] = 2
        await elapse(clock, 1_000)
        assert settles == []
        await elapse(clock, 1_000)
        assert settles == [2]


def survives_a_middle_collection() -> weakref.ref[Cycle]:
    """A cycle that is garbage once a middle collection has run: frozen by
    then, it is still alive after a collection of every generation."""
    cycle = Cycle()
    gc.collect(1)
    alive = weakref.ref(cycle)
    del cycle
    gc.collect()
    return alive


async def test_while_the_held_roles_grow_what_survives_a_middle_collection_is_frozen():
    settle_heap()
    clock = ManualClock()
    held = Held(clock)
    async with running(held.settler):
        assert held.settler.state is HeapState.GROWING
        assert survives_a_middle_collection()() is not None, \
            "a middle collection while growing did not freeze its survivors"
        held.roles.add("a")
        await elapse(clock, 1_000)
        assert held.settler.state is HeapState.GROWING
        assert survives_a_middle_collection()() is not None
        await elapse(clock, 1_000)
        assert held.settler.state is HeapState.STEADY
        assert survives_a_middle_collection()() is None, \
            "froze after a middle collection once the roles stopped growing"
    settle_heap()  # frees the cycles frozen above


async def test_a_settler_that_stops_leaves_the_collector_as_it_found_it():
    clock = ManualClock()
    held = Held(clock)
    hooks = list(gc.callbacks)
    task = asyncio.create_task(held.settler.run())
    await run_ready_callbacks()
    assert len(gc.callbacks) == len(hooks) + 1
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert gc.callbacks == hooks
    assert held.settler.state is HeapState.STEADY


def test_a_settler_needs_a_positive_quiet_time():
    with pytest.raises(ValueError, match="quiet_ms"):
        HeapSettler(lambda: 0, quiet_ms=0)

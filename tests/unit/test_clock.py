"""Clocks: the manual clock tests drive, and the system clock."""

import asyncio
import time

import pytest

from krabka import SystemClock
from krabka.testing import ManualClock
from tests.support.loop import run_ready_callbacks


def test_manual_clock_moves_only_when_advanced():
    clock = ManualClock(start_ms=5_000)
    assert clock.now_ms() == 5_000
    clock.advance(1.5)
    assert clock.now_ms() == 6_500


async def test_a_sleeper_stays_asleep_before_its_instant():
    clock = ManualClock(start_ms=0)
    sleeper = asyncio.create_task(clock.sleep_until(1_000))
    await run_ready_callbacks()
    clock.advance_ms(999)
    await run_ready_callbacks()
    assert not sleeper.done()
    sleeper.cancel()


async def test_a_sleeper_wakes_when_the_clock_reaches_its_instant():
    clock = ManualClock(start_ms=0)
    sleeper = asyncio.create_task(clock.sleep_until(1_000))
    await run_ready_callbacks()
    clock.advance_ms(1_000)
    await asyncio.wait_for(sleeper, timeout=5)


async def test_sleepers_wake_in_deadline_order():
    clock = ManualClock(start_ms=0)
    woke: list[int] = []

    async def sleep(at: int) -> None:
        await clock.sleep_until(at)
        woke.append(at)

    tasks = [asyncio.create_task(sleep(at)) for at in (300, 100, 200)]
    await run_ready_callbacks()
    clock.advance_ms(1_000)
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=5)
    assert woke == [100, 200, 300]


async def test_sleeping_until_a_past_instant_returns_at_once():
    clock = ManualClock(start_ms=10)
    await asyncio.wait_for(clock.sleep_until(5), timeout=5)


async def test_next_wake_skips_cancelled_sleepers():
    clock = ManualClock(start_ms=0)
    first = asyncio.create_task(clock.sleep_until(100))
    second = asyncio.create_task(clock.sleep_until(200))
    await run_ready_callbacks()
    first.cancel()
    await run_ready_callbacks()
    assert clock.next_wake_ms == 200
    second.cancel()


def test_manual_clock_refuses_to_move_backwards():
    with pytest.raises(ValueError, match="backwards"):
        ManualClock().advance_ms(-1)


def test_system_clock_reads_epoch_milliseconds():
    before = int(time.time() * 1000)
    now = SystemClock().now_ms()
    assert before - 1 <= now <= int(time.time() * 1000) + 1


async def test_system_clock_sleep_until_returns_once_the_instant_has_passed():
    clock = SystemClock()
    target = clock.now_ms() + 20
    await asyncio.wait_for(clock.sleep_until(target), timeout=5)
    assert clock.now_ms() >= target

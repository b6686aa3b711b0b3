"""Callers that ask for the same key while a call is in flight share it: one
call, one outcome for all of them, whatever any one of them does."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from krabka.kafka.single_flight import SingleFlight
from tests.support.loop import run_ready_callbacks


class Call:
    """A call that ends when the test says so, counting how often it was made."""

    def __init__(self) -> None:
        self.made = 0
        self.outcome: asyncio.Future[Any] | None = None

    async def __call__(self) -> Any:
        self.made += 1
        self.outcome = asyncio.get_running_loop().create_future()
        return await self.outcome


async def in_flight(flight: SingleFlight[str, Any], call: Call, callers: int = 1
                    ) -> list[asyncio.Future[Any]]:
    """`callers` callers of key "k", once the call is made and waiting."""
    asking = [asyncio.ensure_future(flight.do("k", call)) for _ in range(callers)]
    await run_ready_callbacks()
    assert call.outcome is not None
    assert not any(caller.done() for caller in asking)
    return asking


async def test_callers_of_one_key_at_the_same_time_share_one_call():
    flight: SingleFlight[str, Any] = SingleFlight()
    call = Call()
    callers = await in_flight(flight, call, callers=3)
    assert call.made == 1
    async def answered_at_once() -> str:
        return "other"

    other = asyncio.ensure_future(flight.do("other", answered_at_once))
    call.outcome.set_result("answer")
    assert await asyncio.gather(*callers) == ["answer"] * 3
    assert await other == "other"
    assert call.made == 1


async def test_a_call_that_ended_is_made_again_by_the_next_caller():
    flight: SingleFlight[str, Any] = SingleFlight()
    call = Call()
    (first,) = await in_flight(flight, call)
    call.outcome.set_result("first")
    assert await first == "first"
    (second,) = await in_flight(flight, call)
    call.outcome.set_result("second")
    assert await second == "second"
    assert call.made == 2


async def test_a_failed_call_fails_every_caller_and_the_next_caller_calls_again():
    flight: SingleFlight[str, Any] = SingleFlight()
    call = Call()
    callers = await in_flight(flight, call, callers=2)
    call.outcome.set_exception(ConnectionError("broker gone"))
    for caller in callers:
        with pytest.raises(ConnectionError):
            await caller
    (retry,) = await in_flight(flight, call)
    call.outcome.set_result("answer")
    assert await retry == "answer"


async def test_one_caller_cancelled_leaves_the_call_and_the_others_their_outcome():
    flight: SingleFlight[str, Any] = SingleFlight()
    call = Call()
    leaving, staying = await in_flight(flight, call, callers=2)
    leaving.cancel()
    await run_ready_callbacks()
    assert not call.outcome.cancelled()
    call.outcome.set_result("answer")
    assert await staying == "answer"
    assert leaving.cancelled()


async def test_closing_cancels_the_calls_in_flight_and_their_callers():
    flight: SingleFlight[str, Any] = SingleFlight()
    call = Call()
    (caller,) = await in_flight(flight, call)
    await flight.close()
    assert call.outcome.cancelled()
    with pytest.raises(asyncio.CancelledError):
        await caller

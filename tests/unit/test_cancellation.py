"""Stopping child tasks delivers the caller's own cancellation: a tail closed, or a
watch ended, at the instant its caller is cancelled leaves the caller cancelled."""

from __future__ import annotations

import asyncio
import gc

import pytest

from krabka.follower import Tailing
from krabka.observe.watch import RoleWatch
from krabka.runtime.cancellation import bounded, cancel_and_wait, within
from tests.support.loop import run_ready_callbacks
from tests.support.sim import Cluster


async def test_a_caller_cancelled_while_a_child_stops_is_cancelled_too():
    release = asyncio.Event()

    async def slow_to_stop() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await release.wait()  # its clean-up takes a while

    child = asyncio.create_task(slow_to_stop())
    await run_ready_callbacks(1)
    caller = asyncio.create_task(cancel_and_wait(child))
    await run_ready_callbacks(1)
    caller.cancel()
    await asyncio.wait({caller})
    assert caller.cancelled()
    release.set()
    await asyncio.wait({child})
    assert child.cancelled()


async def test_the_childs_error_is_retrieved_and_not_raised(caplog):
    async def fails_on_cancel() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise RuntimeError("clean-up failed") from None

    child = asyncio.create_task(fails_on_cancel())
    await run_ready_callbacks(1)
    await cancel_and_wait(child)
    assert isinstance(child.exception(), RuntimeError)
    del child
    gc.collect()
    assert "never retrieved" not in caplog.text


async def test_cancel_and_wait_of_nothing_returns():
    await cancel_and_wait()


async def _tailing_with_a_pending_read() -> Tailing:
    transport = Cluster().transport()
    tailing = Tailing()
    await tailing.start(transport.tail(0, 0))
    while await tailing.next_or(run_ready_callbacks(1)) is not None:
        pass  # what the tail has now; then a read stays pending
    return tailing


async def test_a_task_cancelled_while_it_closes_a_tail_ends_cancelled():
    tailing = await _tailing_with_a_pending_read()
    closing = asyncio.create_task(tailing.close())
    await run_ready_callbacks(1)  # it has cancelled the pending read and waits for it
    closing.cancel()
    await asyncio.wait({closing})
    assert closing.cancelled()
    assert not tailing.following  # the tail is closed all the same


async def test_a_task_cancelled_while_it_closes_a_watch_ends_cancelled():
    cluster = Cluster()
    watch = RoleWatch(cluster.transport(), partitions=cluster.partitions)
    await watch.start()
    iterating = asyncio.ensure_future(watch.__anext__())
    await run_ready_callbacks(1)  # it waits on each partition's tail
    iterating.cancel()  # the tails' reads stay pending
    await asyncio.wait({iterating})
    closing = asyncio.create_task(watch.aclose())
    await run_ready_callbacks(1)
    closing.cancel()
    await asyncio.wait({closing})
    assert closing.cancelled()
    with pytest.raises(StopAsyncIteration):
        await watch.__anext__()  # closed all the same


async def _answers_at_once() -> int:
    await run_ready_callbacks(1)
    return 42


async def test_a_bounded_call_gives_the_result_in_time_and_a_timeout_error_after():
    assert await bounded(_answers_at_once(), 10) == 42
    stopped = asyncio.Event()

    async def never_answers() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            stopped.set()

    with pytest.raises(TimeoutError):
        await bounded(never_answers(), 0.01)
    assert stopped.is_set()  # the work was cancelled, and had ended, when it raised


async def test_a_cancelled_bounded_call_cancels_its_work_and_waits_for_its_end():
    stages: list[str] = []

    async def slow_clean_up() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            stages.append("cancelled")
            await run_ready_callbacks(1)
            stages.append("cleaned up")

    calling = asyncio.create_task(bounded(slow_clean_up(), 10))
    await run_ready_callbacks(2)
    calling.cancel()
    await asyncio.wait({calling})
    assert calling.cancelled()
    assert stages == ["cancelled", "cleaned up"]


async def _answers_through_wait_for() -> int:
    # What aiokafka's requests do inside (AIOKafkaConnection.send): Python
    # 3.11's wait_for can return the answer and drop a cancellation.
    return await asyncio.wait_for(_answers_at_once(), 10)


@pytest.mark.parametrize("bound", [bounded, within])
@pytest.mark.parametrize("rounds", range(1, 7))
async def test_a_bounded_call_cancelled_at_any_instant_ends_cancelled(bound, rounds):
    calling = asyncio.create_task(bound(_answers_through_wait_for(), 10))
    await run_ready_callbacks(rounds)
    if calling.done():
        assert calling.result() == 42  # it was over before the cancellation came
        return
    calling.cancel()
    await asyncio.wait({calling})
    assert calling.cancelled()


async def test_a_call_within_a_bound_gives_the_result_in_time_and_a_timeout_error_after():
    assert await within(_answers_at_once(), 10) == 42
    with pytest.raises(TimeoutError):
        await within(asyncio.Event().wait(), 0.01)
    assert asyncio.current_task().cancelling() == 0  # the bound's own cancel was taken back

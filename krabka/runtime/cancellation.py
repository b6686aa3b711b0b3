"""Stopping child tasks without losing the caller's own cancellation.

``task.cancel()`` followed by ``with suppress(CancelledError): await task``
looks like "stop it and wait", but the suppress also swallows a cancellation
of the *caller* that arrives while it waits: the caller carries on as if
never cancelled. A candidate closing its tail that way, at the instant its
campaign was cancelled, went back to waiting for its turn, and the
cancelled `acquire_leadership` never returned (a runner's stop, and a test's
clean-up, then waited for it forever). `cancel_and_wait` tells the two
apart: `asyncio.wait` raises only the caller's own cancellation, never the
child's outcome.

`bounded` is ``asyncio.wait_for`` without the same fault in Python 3.11's
version. `through_cancellation` is the other way round: clean-up that must
finish before the caller's cancellation is delivered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Coroutine, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["bounded", "cancel_and_wait", "retrieve_when_done", "through_cancellation",
           "until_one_ends",
           "within"]


async def cancel_and_wait(*tasks: asyncio.Future[Any]) -> None:
    """Cancel `tasks` and wait until each has ended, its outcome retrieved.

    A cancellation of the caller while it waits is raised (the tasks were
    asked to stop and end on their own); their errors are not.
    """
    for task in tasks:
        task.cancel()
        # Also when the caller is cancelled first and stops waiting for it.
        retrieve_when_done(task)
    if tasks:
        await asyncio.wait(tasks)


def retrieve_when_done(work: asyncio.Future[Any]) -> None:
    """Mark `work`'s error as seen once it ends, so asyncio does not log it
    as lost when nobody is left to wait for it; a caller that does wait
    still gets it (`result()` raises as usual)."""
    work.add_done_callback(_retrieve)


def _retrieve(work: asyncio.Future[Any]) -> None:
    if not work.cancelled():
        work.exception()


async def through_cancellation(work: asyncio.Future[T]) -> T:
    """`work`'s outcome, waited for even if the caller is cancelled meanwhile;
    the cancellation is delivered once `work` has finished.

    For clean-up that must be over when the caller's cancellation arrives
    (its steps are each bounded), so that a cancelled `acquire_leadership`
    has handed its tenure back, and a cancelled runner has stopped its
    function and resigned, by the time they raise.
    """
    cancelled = False
    while not work.done():
        try:
            await asyncio.shield(work)
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        if not work.cancelled():
            work.exception()  # retrieved: the caller's cancellation is what it raises
        raise asyncio.CancelledError
    return work.result()


async def bounded(work: Awaitable[T], seconds: float) -> T:
    """`work`'s outcome, awaited in a task of its own for at most `seconds`.

    `asyncio.wait_for` without its race: Python 3.11's returns the result
    when `work` ends in the same instant as a cancellation of the caller,
    and that cancellation is lost (a cancelled campaign whose registration
    was acknowledged at that instant carried on as a standby; Python 3.12
    fixed it). Here a cancelled caller cancels `work`, waits for its end and
    raises `CancelledError`, whatever the work's outcome. After `seconds`
    the work is cancelled and waited for, then `TimeoutError` is raised
    (its result, if it finished instead of stopping). The work runs in a
    task of its own, not the caller's: aiokafka's stops await tasks that
    ignore their cancellation, and a caller awaiting such a task directly
    would lose its own.
    """
    task = asyncio.ensure_future(work)
    try:
        await asyncio.wait({task}, timeout=seconds)
    except asyncio.CancelledError:
        await cancel_and_wait(task)
        raise
    if not task.done():
        await cancel_and_wait(task)
        if task.cancelled():
            raise TimeoutError(f"not done within {seconds:g} s")
    return task.result()


async def within(work: Awaitable[T], seconds: float) -> T:
    """`work`'s outcome, awaited in the caller's task for at most `seconds`.

    For requests on a hot path, where `bounded`'s task per call costs: it
    runs `work` under ``asyncio.timeout``. A request of aiokafka bounds
    itself with Python 3.11's ``wait_for`` (`AIOKafkaConnection.send`), which
    can return the answer and drop a cancellation of the caller that came
    in the same instant; the task still counts that cancellation
    (``Task.cancelling()``), so it is raised here once `work` has returned.
    `TimeoutError` after `seconds`.
    """
    task = asyncio.current_task()
    requested = task.cancelling() if task is not None else 0
    async with asyncio.timeout(seconds):
        result = await work
    if task is not None and task.cancelling() > requested:
        raise asyncio.CancelledError
    return result


async def until_one_ends(works: Sequence[Coroutine[Any, Any, None]]) -> None:
    """Run `works` side by side until one ends; then cancel the others and wait
    for them. The error the first to end raised is raised.

    Not a TaskGroup: it would wrap the error in an ExceptionGroup, and the
    CLI chooses its exit status by the error's own type.
    """
    tasks = [asyncio.ensure_future(work) for work in works]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

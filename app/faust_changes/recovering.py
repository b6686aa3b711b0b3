"""The worker's changes to Faust's table recovery and to how its consumer hands
records over: ``Recovery``, ``TableManager``, the main loop's ``Consumer`` and
mode's ``FlowControlEvent`` (`app.faust_changes.registry` declares them).

All of them rest on the order in which Faust 0.15.3's recovery loop takes its
steps, so each is applied only on the versions it was written for.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from typing import Any

from faust.tables.recovery import RebalanceAgain
from mode.utils.queues import ThrowableQueue

__all__ = ["REBALANCED_DURING_RECOVERY", "RECOVERY_IDLE", "ActiveFlowKeepsQueues",
           "ChangelogQueueIdles", "Handed", "HandedOnce", "InFlight", "PositionNotPastInFlight",
           "PositionOfUnsought", "RecoveryQueue", "SupersededStepsNeverStart",
           "TableManagerStartsAtOnce", "UnsoughtNoted"]

log = logging.getLogger("app.faust_changes")

REBALANCED_DURING_RECOVERY = ("a rebalance started during table recovery: "
                              "recovery restarts for the new assignment")

RECOVERY_IDLE = 0.25
"""Seconds the table recovery waits on an empty changelog queue before it counts
an idle poll (Faust's own wait: 5 s; two idle polls end a transactional recovery)."""


class SupersededStepsNeverStart:
    """FAUST-1 on ``Recovery``: a step awaited while a newer rebalance is already
    pending is never started, and ``RebalanceAgain`` restarts the recovery for
    the new assignment (Faust swallows one raised during an earlier wait)."""

    signal_recovery_start: Any

    async def _wait(self, coro: Any, timeout: Any = None) -> None:  # noqa: ASYNC109
        if self.signal_recovery_start.is_set():
            if inspect.iscoroutine(coro):
                coro.close()  # never started: no "was never awaited" warning
            elif isinstance(coro, asyncio.Future):
                coro.cancel()
            log.info(REBALANCED_DURING_RECOVERY)
            raise RebalanceAgain()
        await super()._wait(coro, timeout)  # type: ignore[misc]


class RecoveryQueue(ThrowableQueue[Any]):
    """The tables' changelog queue, whose ``get`` gives up after `RECOVERY_IDLE`
    seconds without an event. Only the table recovery reads it."""

    async def get(self) -> Any:
        if not self.empty():  # no task for the wait while events are queued
            return await super().get()
        return await asyncio.wait_for(super().get(), RECOVERY_IDLE)


class ChangelogQueueIdles:
    """FAUST-2 on ``TableManager``: the changelog queue is a `RecoveryQueue`, so the
    recovery's two idle polls, after which it finds a transactional changelog's end
    at the consumer's position, take 0.5 s, not 10 s."""

    _changelog_queue: Any
    app: Any

    @property
    def changelog_queue(self) -> Any:
        if self._changelog_queue is None:
            self._changelog_queue = RecoveryQueue(
                maxsize=self.app.conf.stream_buffer_maxsize, flow_control=self.app.flow_control,
                clear_on_resume=True)
        return self._changelog_queue


class TableManagerStartsAtOnce:
    """FAUST-10 on ``TableManager``: the manager closes its list of tables and starts
    the recovery without Faust's one-second sleep first (every table of the app is
    made before the worker starts; a later one is refused loudly, never lost).
    A copy of Faust's method."""

    should_stop: bool
    recovery: Any

    async def on_start(self) -> None:
        if not self.should_stop:
            await self._update_channels()  # type: ignore[attr-defined]
            await self.recovery.start()


class InFlight:
    """The changelog records the consumer has taken from aiokafka and the table
    recovery may not have applied yet (FAUST-6)."""

    def __init__(self) -> None:
        self.held = False
        """Whether the fetcher holds a batch it has not handed on to the queues."""
        self.first: dict[Any, int] = {}
        """Per partition, the first offset of the batches since nothing was in flight."""

    def settled(self, changelog_queue: Any) -> bool:
        """Whether every record taken so far is applied: no batch held, none queued.

        The recovery updates its offsets as it takes each event off the queue."""
        settled = not self.held and changelog_queue.empty()
        if settled:
            self.first.clear()
        return settled


class PositionNotPastInFlight:
    """FAUST-6 on ``Consumer``: a partition's position is never past a record the
    consumer has taken from its thread and the recovery has not yet applied, so
    the recovery never ends a partition ahead of its records.

    Only the table recovery asks for positions, from the loop that empties the
    changelog queue, so the answer must not wait for the queue."""

    app: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.in_flight = InFlight()

    async def _wait_next_records(self, timeout: float) -> Any:  # noqa: ASYNC109 (Faust's)
        # The fetcher asks for the next batch only after it has put every record
        # of the last one through the conductor into the channels' queues.
        in_flight = self.in_flight
        in_flight.held = False
        in_flight.settled(self.app.tables.changelog_queue)
        records, active_partitions = await super()._wait_next_records(  # type: ignore[misc]
            timeout)
        if records:
            # In the same step as the records' arrival, so a position the consumer
            # thread answered after handing them over finds them noted.
            in_flight.held = True
            for tp, batch in records.items():
                if batch:
                    in_flight.first.setdefault(tp, batch[0].offset)
        return records, active_partitions

    async def position(self, tp: Any) -> int | None:
        position: int | None = await super().position(tp)  # type: ignore[misc]
        in_flight = self.in_flight
        if in_flight.settled(self.app.tables.changelog_queue):
            return position
        first = in_flight.first.get(tp)
        if first is not None and position is not None and position > first:
            return first
        return position


class UnsoughtNoted:
    """FAUST-13 on ``Recovery``: the active changelog partitions of the recovery
    under way that it has not yet sought to the offsets it reads them from."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.unsought: set[Any] = set()

    async def _build_highwaters(self, consumer: Any, tps: set[Any], destination: Any,
                                title: str) -> None:
        # For the active partitions, a recovery round's first step.
        if title == "active":
            self.unsought.clear()
            self.unsought.update(tps)
        await super()._build_highwaters(consumer, tps, destination, title)  # type: ignore[misc]

    async def _seek_offsets(self, consumer: Any, tps: set[Any], offsets: Any,
                            title: str) -> None:
        await super()._seek_offsets(consumer, tps, offsets, title)  # type: ignore[misc]
        self.unsought.difference_update(tps)


class PositionOfUnsought:
    """FAUST-13 on ``Consumer``: before the recovery has sought an active changelog
    partition, its position is the offset the recovery will read it from, not
    where an earlier fetch left the consumer."""

    app: Any

    async def position(self, tp: Any) -> int | None:
        recovery = self.app.tables.recovery
        if tp in recovery.unsought:
            start: int = recovery.active_offsets.get(tp, -1)
            return start
        position: int | None = await super().position(tp)  # type: ignore[misc]
        return position


class Handed:
    """The last offset of each stream partition the consumer has handed to the
    streams since the flow control last emptied their queues (FAUST-12)."""

    def __init__(self) -> None:
        self.last: dict[Any, int] = {}
        self.emptied = 0
        """How many times the queues were emptied: a hand-over that spans one is forgotten."""

    def emptied_now(self) -> None:
        """The queues were emptied: every partition's records are handed over again."""
        self.last.clear()
        self.emptied += 1

    def forget(self, tp: Any) -> None:
        """`tp` is read again from a new offset: its records are handed over again."""
        self.last.pop(tp, None)


class ActiveFlowKeepsQueues:
    """FAUST-12 on mode's ``FlowControlEvent``: a resume empties the queues only when
    the flow was suspended (the events queued while it is active are current),
    and every emptying is counted for the consumer's once-only hand-over."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.handed = Handed()

    def resume(self) -> None:
        if not self.is_active():  # type: ignore[attr-defined]
            super().resume()  # type: ignore[misc]

    def clear(self) -> None:
        super().clear()  # type: ignore[misc]
        self.handed.emptied_now()


def handed_once(handed: Handed, is_changelog_tp: Callable[[Any], bool],
                callback: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`callback` (the conductor's), which hands each offset of a stream partition
    to the streams once between two emptyings of their queues (FAUST-12)."""
    # Faust's test builds a set of every changelog topic per call; on this
    # per-record path it is asked once per topic instead (a worker's tables are
    # fixed once it runs: Faust refuses a table made later).
    changelog: dict[str, bool] = {}

    async def hand_over(message: Any) -> None:
        tp = message.tp
        is_changelog = changelog.get(tp.topic)
        if is_changelog is None:
            is_changelog = changelog[tp.topic] = is_changelog_tp(tp)
        if is_changelog:  # the table recovery seeks and reads changelogs again
            await callback(message)
            return
        last = handed.last.get(tp)
        if last is not None and message.offset <= last:
            return  # fetched again after a seek: its event is queued or handled
        emptied = handed.emptied
        await callback(message)
        if handed.emptied == emptied:
            handed.last[tp] = message.offset

    hand_over.handed_once = True  # type: ignore[attr-defined]
    return hand_over


class HandedOnce:
    """FAUST-12 on ``Consumer``: the fetch loop hands each offset of a stream partition
    to the streams once between two emptyings of their queues, so a record fetched
    again after a seek, whose event is queued or handled, is not handed over twice
    (nor counted as read and skipped); a partition sought is read again."""

    app: Any
    callback: Any

    async def _drain_messages(self, fetcher: Any) -> None:
        if not getattr(self.callback, "handed_once", False):
            self.callback = handed_once(self.app.flow_control.handed,
                                        self._is_changelog_tp,  # type: ignore[attr-defined]
                                        self.callback)
        await super()._drain_messages(fetcher)  # type: ignore[misc]

    async def seek(self, partition: Any, offset: int) -> None:
        self.app.flow_control.handed.forget(partition)
        await super().seek(partition, offset)  # type: ignore[misc]

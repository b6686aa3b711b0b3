"""`watch_events`: the leadership changes of the state topic, as they are committed.

An operator's view of the same events the worker publishes (docs/events.md),
read straight from ``__coordination_state``, so it needs no worker. Each
watched partition is read once to its stable offset, silently unless asked
for the history, to learn every role's state; from there its tail is
followed and each change the fold reports (`coordination.changes`) that is an
event is handed over as it is committed.

A lapse is a judgement of time, not a record: the worker's tick reports it,
and this reader keeps no clock, so ``lapsed`` is never reported here. The
``elected`` of a successor names the lapsed holder (``previous_holder``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Iterable

from coordination.errors import FormatError
from coordination.events import LeadershipEvent, change_event
from coordination.fold import RoleFold
from coordination.partition import role_partition
from coordination.records import decode_key
from coordination.state import Record
from coordination.transport import StateReader

__all__ = ["watch_events"]

Emit = Callable[[LeadershipEvent], None]


async def watch_events(
    reader: StateReader,
    partitions: int,
    emit: Emit,
    *,
    roles: Collection[str] = (),
    from_beginning: bool = False,
    following: Callable[[], None] | None = None,
) -> None:
    """Hand each leadership event of `roles` (every role when empty) to `emit`
    as it is committed; returns only by raising (cancel it to stop).

    Checks `partitions` against the state topic first. Events already in the
    log are handed over only with `from_beginning`; `following` is called
    once every watched partition has been read to its end, before the first
    newer event.
    """
    await reader.check_topic(partitions, None)
    wanted = frozenset(roles)
    watched = sorted({role_partition(role, partitions) for role in wanted}) if wanted \
        else range(partitions)
    watches = [_PartitionWatch(partition, partitions, wanted, emit) for partition in watched]
    for watch in watches:
        await watch.catch_up(reader, report=from_beginning)
    if following is not None:
        following()
    tasks = [asyncio.ensure_future(watch.follow(reader)) for watch in watches]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class _PartitionWatch:
    """The folds of one partition's roles, and where its log was read to."""

    def __init__(self, partition: int, partitions: int, roles: frozenset[str],
                 emit: Emit) -> None:
        self.partition = partition
        self._partitions = partitions
        self._roles = roles
        self._emit = emit
        self._folds: dict[str, RoleFold] = {}
        self._position = 0

    async def catch_up(self, reader: StateReader, *, report: bool) -> None:
        read = await reader.read_partition(self.partition)
        self._apply(read.records, report)
        self._position = read.last_stable_offset

    async def follow(self, reader: StateReader) -> None:
        tail = await reader.tail(self.partition, self._position)
        try:
            while True:
                self._apply((await tail.next()).records, report=True)
        finally:
            await tail.close()

    def _apply(self, records: Iterable[Record], report: bool) -> None:
        for record in records:
            try:
                role = decode_key(record.key).role
            except FormatError:
                continue  # names no role, so it is no role's event
            if role_partition(role, self._partitions) != self.partition:
                continue  # a misplaced record: no role's fold reads it
            if self._roles and role not in self._roles:
                continue
            fold = self._folds.get(role)
            if fold is None:
                # Only the latest error is kept: a watcher reports no skipped records.
                fold = self._folds[role] = RoleFold(role, keep_errors=1)
            event = change_event(fold.state, self.partition, fold.apply(record))
            if report and event is not None:
                self._emit(event)

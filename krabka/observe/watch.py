"""Watchers: the state changes of roles, read from ``__coordination_state``.

`watch_roles` is a read-only follower of the state topic: an async iterator
of `RoleChange`, one per change the fold reports (`krabka.rules.changes`),
each with the role's state after it and the leadership event it is, if any
(`krabka.observe.events`). It needs only a `StateReader`: a watcher writes
nothing, so it registers nothing, appears in no roster and is never a
candidate. `watch_events`, what ``krabka watch`` runs, is the
same iterator reduced to its events.

Each watched partition is read once to its last stable offset and folded,
to learn every role's state; records before the start point (`since`) are
folded silently, the rest are reported, and from there the partition's tail
is followed. Changes come in offset order within a partition; partitions
are interleaved as their records arrive.

A lapse is a judgement of time, not a record: the worker's tick reports it,
and a watcher keeps no clock, so ``lapsed`` is never reported here. The
``elected`` of a successor names the lapsed holder (``previous_holder``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Literal

from krabka.errors import FormatError
from krabka.format.partition import role_partition
from krabka.format.records import decode_key
from krabka.observe.events import LeadershipEvent, change_event
from krabka.rules.changes import Change
from krabka.rules.fold import RoleFold
from krabka.rules.state import Record, RoleState
from krabka.runtime.cancellation import cancel_and_wait
from krabka.transport import PartitionRead, PartitionTail, StateReader

__all__ = ["RoleChange", "RoleWatch", "Since", "watch_events", "watch_roles"]

Since = Literal["now", "beginning"] | Mapping[int, int]
"""Where a watch starts: ``"now"`` (what is committed after it began),
``"beginning"`` (the whole log), or per partition the first offset to report
(a partition left out starts at the beginning)."""

# What a watcher's fold remembers per role, so a watch that runs for months
# stays small: the tenure rule needs recent tokens only (a coordinator never
# hands a token out twice), and `skipped` counts every error anyway.
KEEP_TOKENS = 64
KEEP_ERRORS = 16


@dataclass(frozen=True, slots=True)
class RoleChange:
    """One change of a role's state, located at its record (`partition`, `offset`).

    `state` is the role's state just after the change (a copy of its own);
    `event` is the leadership event the change is (docs/events.md), None for
    a renewal, a vacancy that stays vacant or a malformed record.
    """

    role: str
    partition: int
    offset: int
    change: Change
    state: RoleState
    event: LeadershipEvent | None


def watch_roles(
    reader: StateReader,
    partitions: int,
    *,
    roles: Collection[str] = (),
    since: Since = "now",
) -> RoleWatch:
    """Watch the state changes of `roles` (every role when empty) from `since`.

    Use it as ``async with watch_roles(reader, 16) as watch: async for change
    in watch: ...``; entering checks `partitions` against the state topic and
    reads every watched partition to its end (`RoleWatch.start`), leaving
    closes the partitions' tails. Bad arguments raise ValueError at once.
    """
    return RoleWatch(reader, partitions, roles=roles, since=since)


class RoleWatch:
    """The iterator `watch_roles` returns; see there."""

    def __init__(self, reader: StateReader, partitions: int, *,
                 roles: Collection[str] = (), since: Since = "now") -> None:
        if isinstance(roles, str):
            raise ValueError(f"roles is a collection of role names, not the string {roles!r}")
        if partitions < 1:
            raise ValueError(f"partitions must be at least 1, got {partitions}")
        self._reader = reader
        self._partitions = partitions
        self._roles = frozenset(roles)
        watched = sorted({role_partition(role, partitions) for role in self._roles}) \
            if self._roles else list(range(partitions))
        self._starts = _start_points(since, partitions, watched)
        self._watches = {p: _PartitionWatch(p, partitions, self._roles) for p in watched}
        self._started = False
        self._closed = False
        self._ready: list[RoleChange] = []
        self._pending: dict[int, asyncio.Task[PartitionRead]] = {}

    @property
    def partitions(self) -> list[int]:
        """The partitions watched: those of the roles, or every one."""
        return list(self._watches)

    @property
    def positions(self) -> dict[int, int]:
        """Per watched partition, the offset of the first record whose change
        was not handed out yet: a later ``watch_roles(..., since=watch.positions)``
        goes on from exactly here, without a gap or a repeat."""
        undelivered: dict[int, int] = {}
        for change in self._ready:
            undelivered.setdefault(change.partition, change.offset)
        return {p: undelivered.get(p, w.resume_point()) for p, w in self._watches.items()}

    async def start(self) -> None:
        """Check the topic and read every watched partition to its end
        (called by ``async with`` and by the first ``__anext__``; once)."""
        if self._started:
            return
        if self._closed:
            raise RuntimeError("this watch is closed")
        self._started = True
        await self._reader.check_topic(self._partitions, None)
        for partition, watch in self._watches.items():
            read = await self._reader.read_partition(partition)
            watch.catch_up(read, self._starts[partition])
        for partition, watch in self._watches.items():
            watch.tail = await self._reader.tail(partition, watch.read_to)

    def __aiter__(self) -> RoleWatch:
        return self

    async def __anext__(self) -> RoleChange:
        """The next change; waits for one to be committed. Cancelling it loses nothing."""
        await self.start()
        while True:
            if self._closed:
                raise StopAsyncIteration
            for watch in self._watches.values():
                change = watch.next_backlog()
                if change is not None:
                    return change
            if self._ready:
                return self._ready.pop(0)
            await self._wait_for_records()

    async def _wait_for_records(self) -> None:
        for partition, watch in self._watches.items():
            if partition not in self._pending:
                assert watch.tail is not None, "a started watch tails every partition"
                self._pending[partition] = asyncio.ensure_future(watch.tail.next())
        await asyncio.wait(self._pending.values(), return_when=asyncio.FIRST_COMPLETED)
        for partition in sorted(self._pending):
            task = self._pending[partition]
            if task.done():
                del self._pending[partition]
                # A failed fetch (an outage) ends the iteration with its error.
                self._ready.extend(self._watches[partition].fold(task.result().records))

    async def aclose(self) -> None:
        """Stop following: close every partition's tail (idempotent)."""
        if self._closed:
            return
        self._closed = True
        pending = list(self._pending.values())
        self._pending.clear()
        try:
            await cancel_and_wait(*pending)
        finally:  # a cancelled caller still closes the tails
            for watch in self._watches.values():
                if watch.tail is not None:
                    await watch.tail.close()
                    watch.tail = None

    async def __aenter__(self) -> RoleWatch:
        try:
            await self.start()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _start_points(since: Since, partitions: int, watched: list[int]) -> dict[int, int | None]:
    """Per watched partition, the first offset to report (None: its end at the start)."""
    if since == "now":
        return dict.fromkeys(watched, None)
    if since == "beginning":
        return dict.fromkeys(watched, 0)
    if isinstance(since, str) or not isinstance(since, Mapping):
        raise ValueError(f"since is 'now', 'beginning' or a mapping of partition to offset, "
                         f"got {since!r}")
    for partition, offset in since.items():
        if not 0 <= partition < partitions:
            raise ValueError(f"since names partition {partition}, outside 0..{partitions - 1}")
        if offset < 0:
            raise ValueError(f"since gives partition {partition} the negative offset {offset}")
    return {partition: since.get(partition, 0) for partition in watched}


class _PartitionWatch:
    """The folds of one partition's roles, and how far its log was read."""

    def __init__(self, partition: int, partitions: int, roles: frozenset[str]) -> None:
        self.partition = partition
        self._partitions = partitions
        self._roles = roles
        self._folds: dict[str, RoleFold] = {}
        self.position = 0
        """The offset after the last record folded."""
        self.read_to = 0
        """Where the tail starts: the stable offset of the first read."""
        self.tail: PartitionTail | None = None
        self._report_from = 0
        self._backlog: list[Record] = []
        self._next = 0

    def catch_up(self, read: PartitionRead, start: int | None) -> None:
        """Fold the records before `start` silently; keep the rest to report
        (folded on demand, so a watch from the beginning holds no list of
        changes)."""
        self.read_to = read.last_stable_offset
        self._report_from = read.last_stable_offset if start is None else start
        self._backlog = read.records
        while self._next < len(self._backlog) and \
                self._backlog[self._next].offset < self._report_from:
            self._apply(self._backlog[self._next])
            self._next += 1

    def next_backlog(self) -> RoleChange | None:
        """The next change of the first read's records from the start point."""
        while self._next < len(self._backlog):
            record = self._backlog[self._next]
            self._next += 1
            change = self._apply(record)
            if change is not None:
                return change
        self._backlog = []  # drained: let the records go
        self._next = 0
        return None

    def resume_point(self) -> int:
        """The offset a new watch would go on from (no change of this one is pending)."""
        if self._next < len(self._backlog):
            return self._backlog[self._next].offset
        return max(self.position, self._report_from)

    def fold(self, records: list[Record]) -> list[RoleChange]:
        """Fold a tail's records; the changes they made."""
        changes = []
        for record in records:
            change = self._apply(record)
            if change is not None:
                changes.append(change)
        return changes

    def _apply(self, record: Record) -> RoleChange | None:
        if record.offset < self.position:
            return None  # already folded: a tail may hand a record over again
        self.position = record.offset + 1
        try:
            role = decode_key(record.key).role
        except FormatError:
            return None  # names no role, so it is no role's change
        if role_partition(role, self._partitions) != self.partition:
            return None  # a misplaced record: no role's fold reads it
        if self._roles and role not in self._roles:
            return None
        fold = self._folds.get(role)
        if fold is None:
            fold = self._folds[role] = RoleFold(role, keep_tokens=KEEP_TOKENS,
                                                keep_errors=KEEP_ERRORS)
        change = fold.apply(record)
        if change is None or record.offset < self._report_from:
            return None  # folded silently: before the start point
        return RoleChange(role, self.partition, record.offset, change, fold.snapshot(),
                          change_event(fold.state, self.partition, change))


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

    `watch_roles` reduced to its events. Events already in the log are
    handed over only with `from_beginning`; `following` is called once every
    watched partition has been read to its end, before the first event.
    """
    async with watch_roles(reader, partitions, roles=roles,
                           since="beginning" if from_beginning else "now") as watch:
        if following is not None:
            following()
        async for change in watch:
            if change.event is not None:
                emit(change.event)

"""`watch_term_events`: term-mode leadership events, read from ``__coordination_terms``.

Term mode's counterpart of `krabka.observe.watch.watch_events`, which still
gives a term-mode role's ``member-joined`` and ``member-left`` (registrations
stay on the state topic). Each watched terms partition is read once to its
end, silently unless asked for the history, to learn every role's term; from
there its tail is followed and each change the fold reports
(`TermFold.apply`) is handed over as an event (`term_change_event`):

- ``elected`` when a claim wins a new term, naming the previous term's
  holder (``previous_holder``, ``previous_token``): compaction keeps every
  claim, so the partition always shows it, even in the history;
- ``resigned`` when the holder's resign is read.

What it cannot report: ``lapsed`` (a holder's silence is a judgement of
time, and this reader keeps no clock; ``roles --fencing term`` shows it), a
claim that lost its term (it changes nothing), a zombie's writes (they are
on the leader's output topics, not here), and resigns of the history once
the partition is compacted: a role's heartbeats share one key, so only the
latest survives, and ``--from-beginning`` shows an older resign only until
the cleaner runs. A term-mode ``elected`` carries no rank and no deadline
(docs/events.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Iterable

from krabka.format.partition import role_partition
from krabka.observe.events import LeadershipEvent, term_change_event
from krabka.rules.state import Record
from krabka.term.fold import TermPartitionFold
from krabka.transport import TermLog

__all__ = ["watch_term_events"]

Emit = Callable[[LeadershipEvent], None]


async def watch_term_events(
    log: TermLog,
    partitions: int,
    emit: Emit,
    *,
    roles: Collection[str] = (),
    from_beginning: bool = False,
    following: Callable[[], None] | None = None,
) -> None:
    """Hand each term-mode event of `roles` (every role when empty) to `emit`
    as it is read; returns only by raising (cancel it to stop).

    Checks `partitions` against the terms topic first. Events already in the
    log are handed over only with `from_beginning`; `following` is called
    once every watched partition has been read to its end, before the first
    newer event.
    """
    if isinstance(roles, str):
        raise ValueError(f"roles is a collection of role names, not the string {roles!r}")
    await log.check_terms_topic(partitions)
    wanted = frozenset(roles)
    watched = sorted({role_partition(role, partitions) for role in wanted}) if wanted \
        else range(partitions)
    watches = [_TermPartitionWatch(partition, partitions, wanted, emit) for partition in watched]
    for watch in watches:
        await watch.catch_up(log, report=from_beginning)
    if following is not None:
        following()
    tasks = [asyncio.ensure_future(watch.follow(log)) for watch in watches]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class _TermPartitionWatch:
    """The fold of one terms partition's roles, and where it was read to."""

    def __init__(self, partition: int, partitions: int, roles: frozenset[str],
                 emit: Emit) -> None:
        self.partition = partition
        self._roles = roles
        self._emit = emit
        self._fold = TermPartitionFold(partition, partitions)
        self._position = 0

    async def catch_up(self, log: TermLog, *, report: bool) -> None:
        read = await log.read_terms(self.partition)
        self._apply(read.records, report)
        self._position = read.high_watermark

    async def follow(self, log: TermLog) -> None:
        tail = await log.tail_terms(self.partition, self._position)
        try:
            while True:
                self._apply((await tail.next()).records, report=True)
        finally:
            await tail.close()

    def _apply(self, records: Iterable[Record], report: bool) -> None:
        for record in records:
            applied = self._fold.apply(record)
            if applied is None:
                continue
            role, change = applied
            if self._roles and role not in self._roles:
                continue
            if report and change is not None:
                self._emit(term_change_event(role, self.partition, change))

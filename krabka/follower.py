"""A candidate's view of its role's partition: read once, then tail.

Records are folded into the role's state as they arrive and not kept, so a
standby that waits for days costs O(roster) per record, not O(log). The
fold is never rebuilt: the first refresh starts from the partition's fold
that the reader's followers share (`krabka.shared_fold`), and every
later one reads only from the stable offset the follower already folded, so
a read costs the records committed since, not the partition's length (which
grows with every other role's renewals).
Waiting is event-driven: a standby wakes on the next committed record of
its role (a renewal, a resignation's tombstone) within one fetch round
trip, or at the instant `evaluate` named, whichever comes first. Its tail
follows only its role (`StateReader.tail` with ``role``): the other roles of
the partition, hundreds of them on a busy worker, wake it for nothing. What
needs every record or every move of the marks asks for it
(`refresh(every_record=True)`, `longest_lease`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Coroutine, Iterable
from typing import Any

from krabka import defaults
from krabka.clock import Clock
from krabka.errors import TransportError
from krabka.rules.evaluate import Placement
from krabka.rules.fold import RoleFold
from krabka.rules.state import Record, RoleState
from krabka.runtime.cancellation import cancel_and_wait, retrieve_when_done
from krabka.shared_fold import lease_length_ms, shared_fold
from krabka.transport import PartitionRead, PartitionTail, StateReader

__all__ = ["PartitionFollower", "Tailing"]

class Tailing:
    """A `PartitionTail` and its pending read, which a cancelled wait keeps.

    The followers of both topics wait on it for the next read or an instant,
    whichever comes first; `next_or` can be cancelled without losing a read.
    A read that failed raises once and closes the tail (`following` is then
    False), so a follower never waits again on a tail that cannot deliver.
    """

    def __init__(self) -> None:
        self._tail: PartitionTail | None = None
        self._pending: asyncio.Future[PartitionRead] | None = None

    @property
    def following(self) -> bool:
        """Whether a tail was started (and not closed)."""
        return self._tail is not None

    async def start(self, opening: Coroutine[Any, Any, PartitionTail]) -> None:
        """Replace the tail (and drop its pending read) by the one `opening` gives."""
        try:
            await self.close()
        except BaseException:
            opening.close()  # never started: closed, not left for the collector to warn of
            raise
        self._tail = await opening

    async def next_or(self, sleep: Awaitable[None] | None) -> PartitionRead | None:
        """The tail's next read, or None if `sleep` ended first.

        A failed read raises its error here once and closes the tail.
        """
        assert self._tail is not None, "start() the tail first"
        if self._pending is None:
            self._pending = asyncio.ensure_future(self._tail.next())
            # A wait cancelled for good (its tenure or process gone) leaves
            # the read to nobody: its error is then not a lost one.
            retrieve_when_done(self._pending)
        waiters: list[asyncio.Future[Any]] = [self._pending]
        sleeper = None
        if sleep is not None:
            sleeper = asyncio.ensure_future(sleep)
            waiters.append(sleeper)
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if sleeper is not None:
                sleeper.cancel()
        if not self._pending.done():
            return None
        pending, self._pending = self._pending, None
        try:
            return pending.result()
        except Exception:
            # The error is the caller's once. A tail that failed returns nothing
            # more, so it is dropped: the follower's next wait reads what it
            # missed and starts a new tail from there.
            await self.close()
            raise

    def ready(self) -> bool:
        """Whether the tail returned a read that no wait has taken yet."""
        return self._pending is not None and self._pending.done()

    def drain(self) -> PartitionRead | None:
        """The read the tail returned that no wait has taken yet, if any."""
        pending = self._pending
        if (pending is None or not pending.done() or pending.cancelled()
                or pending.exception() is not None):
            return None
        self._pending = None
        return pending.result()

    def returned_to(self) -> int | None:
        """The tail's `PartitionTail.returned_to`; None without a tail, or while
        a read it returned is still to be taken."""
        if self._tail is None or (self._pending is not None and self._pending.done()):
            return None
        return self._tail.returned_to()

    async def close(self) -> None:
        """Drop the pending read and close the tail."""
        pending, self._pending = self._pending, None
        try:
            if pending is not None:
                await cancel_and_wait(pending)
        finally:  # a cancelled caller still closes the tail
            if self._tail is not None:
                tail, self._tail = self._tail, None
                await tail.close()


class PartitionFollower:
    """One role's state from its partition's committed records, kept current
    by a tail."""

    def __init__(self, reader: StateReader, partition: int, role: str, clock: Clock,
                 placement: Placement | None = None,
                 challenge_stagger: float = defaults.CHALLENGE_STAGGER) -> None:
        self._reader = reader
        self.partition = partition
        self.role = role
        self._clock = clock
        self._shared = shared_fold(reader, partition, placement, challenge_stagger)
        self._placement = placement
        self._challenge_stagger = challenge_stagger
        self._fold = RoleFold(role, placement=placement, challenge_stagger=challenge_stagger)
        self._next_offset = 0
        self._folded_to = 0
        """A stable offset below which every committed record this role's fold
        folds is folded (other roles' records may not have been read)."""
        self.last_stable_offset = 0
        self.high_watermark = 0
        self.longest_lease_ms = 0
        """The longest lease of any role seen in this follower's own reads
        (`longest_lease` has them all)."""
        self._read_at: int | None = None
        """When (monotonic ms) the last read was folded in, None before the first."""
        self._tail = Tailing()

    async def refresh(self, *, every_record: bool = False) -> None:
        """Fold everything committed up to a stable offset read after this call.

        What a challenge decides on: once it returns, `state()` holds every
        record committed below `last_stable_offset`, an offset the partition
        reached no earlier than the call, so nothing committed before the
        caller decided to look is missing. Only what is new is read: the
        first time, what the shared fold of the partition has not folded yet;
        then from the stable offset the follower already folded. The state is
        the one a read of the whole partition would fold
        (tests/unit/test_follower_refresh.py, tests/unit/test_shared_fold.py)
        and the cost is the records committed since the last read. The tail
        restarts at the new stable offset, following only this role unless
        `every_record`: then every record and every move of the marks wakes
        `wait` (the stuck stable offset hold waits for the marks to move).
        """
        if self._folded_to == 0 and self._next_offset == 0:  # nothing folded yet
            read = await self._start_from_shared()
        else:
            self._catch_up_with_tail()
            read = await self._reader.read_partition(self.partition, self._folded_to)
            self._apply(read)
        await self._tail.start(self._reader.tail(
            self.partition, read.last_stable_offset, role=None if every_record else self.role))

    async def longest_lease(self) -> int:
        """The longest lease (ms) any role of the partition wrote, up to a read
        made now: the partition's shared fold, brought up to date, has seen
        every record, where this follower's tail sees only its role's."""
        folded = await self._shared.role(self.role)
        self.longest_lease_ms = max(self.longest_lease_ms, folded.longest_lease_ms)
        return self.longest_lease_ms

    async def _start_from_shared(self) -> PartitionRead:
        folded = await self._shared.role(self.role)
        self._fold = RoleFold(self.role, state=folded.state, placement=self._placement,
                              challenge_stagger=self._challenge_stagger)
        self._next_offset = folded.next_offset
        self.longest_lease_ms = folded.longest_lease_ms
        self._folded_to = folded.read.last_stable_offset
        self._marks(folded.read)
        return folded.read

    def _catch_up_with_tail(self) -> None:
        """Fold what the tail returned and no wait took, and skip what it skipped:
        a tail of one role moved past the other roles' records, which a read
        from there need not return again."""
        ready = self._tail.drain()
        if ready is not None:
            self._apply(ready)
        returned = self._tail.returned_to()
        if returned is not None:
            self._folded_to = max(self._folded_to, returned)

    def read_within(self, ms: int) -> bool:
        """Whether `state()` stands on a read folded in at most `ms` ago (on the
        clock's monotonic time) and the tail holds no later read not yet taken:
        a read made now would add only what was committed in those `ms`."""
        return (self._read_at is not None and not self._tail.ready()
                and self._clock.monotonic_ms() - self._read_at <= ms)

    async def delivered(self, end: int) -> list[Record] | None:
        """The role's records below `end` that the tail has delivered since the
        last read folded in, taken (and folded) without waiting for the broker;
        None unless the tail has returned every record of the role below `end`.

        A challenger asks it for the records committed between the read it
        decided on and its first lease: the tail, still following, has
        usually fetched them by the time the lease commits, and then nothing
        need be read again.
        """
        if not self._tail.following:
            return None
        taken: list[Record] = []
        while True:
            try:
                # A zero sleep: only a read the tail holds already is taken.
                read = self._tail.drain() or await self._tail.next_or(asyncio.sleep(0))
            except TransportError:
                return None
            if read is None:
                break
            self._apply(read)
            taken += read.records
            if read.last_stable_offset >= end:
                return taken
        returned = self._tail.returned_to()
        return taken if returned is not None and returned >= end else None

    def state(self) -> RoleState:
        """The role's state as of the records read so far (a snapshot)."""
        return self._fold.snapshot()

    async def wait(self, until_ms: int | None) -> bool:
        """Wait for the partition to change, or for `until_ms` on the clock.

        Returns True when new records or stable-offset marks arrived.
        """
        if not self._tail.following:
            await self.refresh()
        sleep = None if until_ms is None else self._clock.sleep_until(until_ms)
        read = await self._tail.next_or(sleep)
        if read is None:
            return False
        self._apply(read)
        return True

    def _apply(self, read: PartitionRead) -> None:
        self._fold_new(read.records)
        self._marks(read)
        # Every read holds each committed record below its stable offset (from
        # where it started, which is at or below what was folded): an older
        # tail read that reports a lower stable offset never moves this back.
        self._folded_to = max(self._folded_to, read.last_stable_offset)

    def _fold_new(self, records: Iterable[Record]) -> None:
        for record in records:
            if record.offset >= self._next_offset:
                self._fold.apply(record)
                self._next_offset = record.offset + 1
                length = lease_length_ms(record)
                if length is not None:
                    self.longest_lease_ms = max(self.longest_lease_ms, length)

    def _marks(self, read: PartitionRead) -> None:
        self._read_at = self._clock.monotonic_ms()
        self.last_stable_offset = read.last_stable_offset
        self.high_watermark = read.high_watermark

    async def close(self) -> None:
        """Stop tailing."""
        await self._tail.close()

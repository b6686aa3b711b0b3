"""A term-mode member's view of its role's partition of the terms topic.

Read once, then tailed: records are folded into the role's `TermView` as
they arrive (`krabka.term.fold`), so neither a standby nor the leader
re-reads the partition. The tail follows this role only: the heartbeats of
the partition's other roles neither reach the fold nor wake the member. A
tail that fails raises its error once from `wait`; the next `wait` reads the
partition to its end and tails again from there, folding only what it had
not folded. `quiet_since_ms` is when, on this member's monotonic
clock, it read the latest sign of life of the current term (the view's
`sign_offset` moved), or began reading: a standby's election timeout runs
from there (docs/term-mode.md#the-election-rule).
"""

from __future__ import annotations

from krabka.clock import Clock
from krabka.follower import Tailing
from krabka.rules.state import Record
from krabka.term.fold import TermFold, TermView
from krabka.transport import PartitionRead, TermLog

__all__ = ["TermFollower"]


class TermFollower:
    """One role's `TermView`, kept current by a tail of its terms partition."""

    def __init__(self, log: TermLog, partition: int, role: str, clock: Clock) -> None:
        self._log = log
        self.partition = partition
        self.role = role
        self._clock = clock
        self._fold = TermFold(role)
        self._next_offset = 0
        self.end_offset = 0
        """Where the reads have reached: every record of the role below it is folded."""
        self.quiet_since_ms = clock.monotonic_ms()
        self._sign: int | None = None
        self._tail = Tailing()

    @property
    def view(self) -> TermView:
        """The role's view as of the records read so far (live: do not keep it)."""
        return self._fold.view

    async def read_to_end(self) -> None:
        """Read the partition to its end now (a claimant's read back to its claim).

        Only records past what was folded are applied; a tail started before
        is kept, and skips what this read already folded.
        """
        read = await self._log.read_terms(self.partition)
        self._apply(read)
        if not self._tail.following:
            await self._tail.start(self._log.tail_terms(self.partition, read.high_watermark,
                                                        role=self.role))

    async def wait(self, until_monotonic_ms: int | None) -> bool:
        """Wait for new records, or for `until_monotonic_ms` on the monotonic clock.

        Returns True when records arrived. Cancelling it loses nothing: the
        pending read is kept for the next call. A failed read raises its
        error; the next call starts over with `read_to_end`, and returns at
        once if that read folded anything new.
        """
        if not self._tail.following:
            folded = self._next_offset
            await self.read_to_end()
            if self._next_offset > folded:
                return True
        sleep = (None if until_monotonic_ms is None
                 else self._clock.sleep_until_monotonic(until_monotonic_ms))
        read = await self._tail.next_or(sleep)
        if read is None:
            return False
        self._apply(read)
        return True

    def _apply(self, read: PartitionRead) -> None:
        self._fold_new(read.records)
        self.end_offset = max(self.end_offset, read.last_stable_offset)

    def _fold_new(self, records: list[Record]) -> None:
        for record in records:
            if record.offset >= self._next_offset:
                self._fold.apply(record)
                self._next_offset = record.offset + 1
        sign = self._fold.view.sign_offset
        if sign != self._sign:
            self._sign = sign
            self.quiet_since_ms = self._clock.monotonic_ms()

    async def close(self) -> None:
        """Stop tailing."""
        await self._tail.close()

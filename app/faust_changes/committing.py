"""The worker's changes to Faust's consumer's commit bookkeeping (`app.faust_changes.registry`
declares them)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from app.faust_changes.producing import UnflushedWritesError

__all__ = ["GapEndsBeforeTheRecord", "GapsNotedInBulk", "StalledFlushPutsCommitOff"]

log = logging.getLogger("app.faust_changes")


class StalledFlushPutsCommitOff:
    """FAUST-4 and FAUST-16 on Faust's ``Consumer``: a commit whose flush of the table
    writes stalls is put off to the next commit interval, where Faust's consumer
    treats any error of a commit as a crash that stops the worker.

    The flush fails before any offset or transaction marker is sent, so nothing
    of the commit happened: Faust's acknowledged offsets and committed offsets
    are as they were, and the next commit covers these offsets and later ones
    (as after a commit the broker refused, which Faust's own commit returns as
    not done). A broker that stays stalled past the transaction timeout aborts
    the transaction, and the next commit fails as a fenced one does.
    """

    async def _commit_offsets(self, offsets: Mapping[Any, int],
                              start_new_transaction: bool = True) -> bool:
        try:
            did_commit: bool = await super()._commit_offsets(  # type: ignore[misc]
                offsets, start_new_transaction)
        except UnflushedWritesError as exc:
            log.warning("commit put off to the next commit interval: %s", exc)
            return False
        return did_commit


class GapEndsBeforeTheRecord:
    """FAUST-18: the gap noted before a record ends just before it.

    Faust's fetch loop notes the offsets a partition skips (a transaction's
    commit marker, a compacted record) as a gap, so that a commit can pass
    them, calling ``_add_gap(tp, last read + 1, the record's offset)``, and
    ``_add_gap`` takes its end as included: the record's own offset went into
    the gap as well as, once acknowledged, into the acked offsets. A commit's
    offset is the end of the first run of consecutive acked offsets, and the
    repeat ended that run: on a partition written one transaction per record,
    each commit passed one record. The gap given to Faust here ends at the
    offset before the record.
    """

    async def _add_gap(self, tp: Any, offset_from: int, offset_to: int) -> None:
        await super()._add_gap(tp, offset_from, offset_to - 1)  # type: ignore[misc]


class GapsNotedInBulk:
    """FAUST-19: a gap is noted in a list, and the gaps a commit passes join the
    acknowledged offsets when the commit looks for its offset, where Faust rebuilt
    an interval tree of every gap at each one.

    Faust's ``_add_gap`` adds the interval to the partition's ``IntervalTree``,
    yields to the event loop, then merges the whole tree's overlaps, which
    builds a new tree; ``_new_offset`` then moves the intervals below the
    highest acknowledged offset into the acknowledged offsets and chops them
    off the tree one by one. On a partition written one transaction per record
    the fetch loop notes a gap before every record, so each record cost a
    rebuild of a tree of every gap since the last commit, and a turn of the
    event loop. Here ``_add_gap`` appends the interval to the partition's
    pending gaps (the same interval, clipped to the committed offset as
    Faust's is), and ``_new_offset`` first moves those that begin below the
    highest acknowledged offset into the acknowledged offsets, as Faust's
    does with the tree's, which stays empty. A gap never holds an
    acknowledged offset (it is what the fetch skipped), so a gap that begins
    below that offset ends below it too. A revoked partition's gaps are
    dropped with its acknowledged offsets.
    """

    _acked: Any
    _committed_offset: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pending_gaps: dict[Any, list[tuple[int, int]]] = {}

    async def _add_gap(self, tp: Any, offset_from: int, offset_to: int) -> None:
        committed = self._committed_offset[tp]
        if committed is not None:
            offset_from = max(offset_from, committed + 1)
        if offset_from <= offset_to:  # the end is included, as Faust's
            self._pending_gaps.setdefault(tp, []).append((offset_from, offset_to + 1))

    def _new_offset(self, tp: Any) -> int | None:
        pending = self._pending_gaps.get(tp)
        acked = self._acked[tp]
        if pending and acked:
            highest = max(acked)
            later = []
            for begin, end in pending:
                if begin < highest:
                    acked.extend(range(begin, end))
                else:
                    later.append((begin, end))
            self._pending_gaps[tp] = later
        offset: int | None = super()._new_offset(tp)  # type: ignore[misc]
        return offset

    async def on_partitions_revoked(self, revoked: set[Any]) -> None:
        for tp in revoked:
            self._pending_gaps.pop(tp, None)
        await super().on_partitions_revoked(revoked)  # type: ignore[misc]

"""The worker's change to Faust's consumer's commit bookkeeping (`app.faust_changes.registry`
declares it)."""

from __future__ import annotations

from typing import Any

__all__ = ["GapEndsBeforeTheRecord"]


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

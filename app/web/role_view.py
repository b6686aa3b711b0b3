"""The JSON shapes of docs/app.md#web-view for one role, from table values or a `RoleState`.

`row` is one row of ``GET /roles/`` (the library's `summary` plus the last
offset folded, which a client following ``GET /events/`` compares event
offsets with); `detail` is ``GET /roles/{role}/``.
Both take the instant of the read, because status is computed on read. The
summary and the status are the library's (`krabka.observe.json_forms`), which
the operator CLI's ``roles`` prints too, so the table path and the log path
(`krabka.describe_roles`) answer in one shape.
"""

from __future__ import annotations

import heapq
from typing import Any

from agents.fold.partition_value import PartitionValue
from agents.fold.role_value import MAX_ERRORS, RoleValue
from krabka.observe.json_forms import (
    Status,
    lease_json,
    out_of_order_json,
    roster_json,
    status_of,
)
from krabka.observe.json_forms import summary_json as summary
from krabka.rules.state import RoleState

__all__ = [
    "Skips",
    "Status",
    "detail",
    "merged_state",
    "row",
    "skips_of_state",
    "skips_of_values",
    "status_of",
    "summary",
]


class Skips:
    """What a role reports as skipped: a full count and the recent reasons."""

    def __init__(self, count: int, recent: list[tuple[int, str]], misplaced: int) -> None:
        self.count = count
        self.recent = recent
        self.misplaced = misplaced

    @property
    def last_error(self) -> dict[str, Any] | None:
        """The latest skipped record as ``{"offset", "reason"}``."""
        if not self.recent:
            return None
        offset, reason = self.recent[-1]
        return {"offset": offset, "reason": reason}


def merged_state(value: RoleValue, partition: PartitionValue | None) -> RoleState:
    """The role's `RoleState` as `build_role_state` gives it from the log.

    The value's state, with the partition's undecodable keys merged by offset
    into its recent errors and counted as skipped, and the partition's
    misplaced records counted.
    """
    state = value.state.copy()
    if partition is not None:
        state.errors = list(heapq.merge(state.errors, partition.key_errors))[-MAX_ERRORS:]
        state.skipped += partition.undecodable
        state.misplaced = partition.misplaced
    return state


def skips_of_values(value: RoleValue, partition: PartitionValue | None) -> Skips:
    """Skipped records as the table counts them (counts are complete, reasons recent)."""
    state = value.state
    if partition is None:
        return Skips(state.skipped, list(state.errors), 0)
    recent = list(heapq.merge(state.errors, partition.key_errors, partition.misplaced_errors))
    return Skips(state.skipped + partition.undecodable + partition.misplaced,
                 recent[-MAX_ERRORS:], partition.misplaced)


def skips_of_state(state: RoleState) -> Skips:
    """Skipped records of a `RoleState` read from the log (misplaced ones have no reason)."""
    return Skips(state.skipped + state.misplaced, list(state.errors), state.misplaced)


def row(value: RoleValue, now_ms: int) -> dict[str, Any]:
    """One role of ``GET /roles/``: its summary and the last offset folded into it."""
    return {**summary(value.state, now_ms), "offset": value.last_offset}


def detail(state: RoleState, skips: Skips, partition: int, now_ms: int,
           offset: int) -> dict[str, Any]:
    """The row plus roster, lease, skipped count and last error."""
    return {
        **summary(state, now_ms),
        "offset": offset,
        "partition": partition,
        "roster": roster_json(state),
        "lease": lease_json(state),
        "skipped": skips.count,
        "misplaced": skips.misplaced,
        "last_error": skips.last_error,
        "errors": [{"offset": o, "reason": r} for o, r in skips.recent],
        "out_of_order": out_of_order_json(state),
        "now": now_ms,
    }

"""When each role's table value next has a lapse to report, per state partition.

The tick agent reports the lapses nobody wrote a record about
(`agents.fold.agent.apply_tick`). Decoding every value of the ticked partition at
every tick cost the worker N/16 decodes a tick at 16 partitions, N decodes a
second at one tick a second: at 10 000 roles, most of a core. This index
keeps, per state partition, the time at which each role's value is next due
(`agents.fold.rules.due_at`), so a tick decodes only the values due.

It is derived from the table and kept in memory only:

- a partition's entries are built from the table at its first tick (one pass
  over the table's keys, decoding that partition's values);
- each write of a role's value by the fold, terms and tick agents notes the
  value's new due time;
- a rebalance forgets every partition, because Faust restores values into the
  table (and takes partitions away) without passing through the agents.

The tick timer asks it too, and sends no tick to a partition with nothing
due: each tick is processed inside its partition's transaction, so a tick
of every partition every second made an idle worker commit 16 transactions
a second, and made the commit of an event that came at the same moment wait
for all of them.

A value whose check found nothing more to report while its due time is past
has nothing to report until it is written again (`due_at`: the checks read
the time only as ``now >= due``), so it leaves the index until then.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["DueIndex"]


class DueIndex:
    """Per state partition: role key -> the time (ms) its value is next due."""

    def __init__(self) -> None:
        self._due: dict[int, dict[bytes, int]] = {}

    def built(self, partition: int) -> bool:
        """Whether `partition`'s entries are known (else `build` them from the table)."""
        return partition in self._due

    def build(self, partition: int, entries: Iterable[tuple[bytes, int | None]]) -> None:
        """Set `partition`'s entries from every role value of it: (key, due time or None)."""
        self._due[partition] = {key: due for key, due in entries if due is not None}

    def note(self, partition: int, key: bytes, due: int | None) -> None:
        """A value of `partition` was written: it is next due at `due` (None: never)."""
        entries = self._due.get(partition)
        if entries is None:
            return  # not built: the build reads the table, this write included
        if due is None:
            entries.pop(key, None)
        else:
            entries[key] = due

    def wants_tick(self, partition: int, now_ms: int) -> bool:
        """Whether a tick of `partition` at `now_ms` would find anything to do: its
        entries are not built yet, or a value is due."""
        entries = self._due.get(partition)
        return entries is None or any(due <= now_ms for due in entries.values())

    def due(self, partition: int, now_ms: int) -> list[bytes]:
        """The keys of `partition`'s values due at `now_ms` (the partition must be built)."""
        return [key for key, due in self._due[partition].items() if due <= now_ms]

    def forget(self) -> None:
        """Forget every partition (at a rebalance); each is built again at its next tick."""
        self._due.clear()

"""One partition's fold, shared by every candidate that reads it through one reader.

A candidate starts from its role's state as of a stable offset read after it
started. Read alone, that is a read of the partition from offset 0, and the
partition holds every other role's registrations and renewals: N candidates
starting on one worker would each read and decode a partition that itself
grows with N. A `SharedFold` keeps, for every role met on its partition, the
state its records fold to up to one stable offset; a starting candidate
brings it up to date (reading only what was committed since another
candidate last did) and starts from a copy of its own role's state. So N
candidates cost one pass over each partition, not N.

The copy is the state a read from offset 0 folds (tests/unit/test_shared_fold.py):
a role's fold ignores every other role's record except one whose key does
not decode (it cannot be attributed, so every role lists it); the shared fold
keeps those and replays them into a role it meets later. It keeps the longest
lease any role of the partition wrote (`PartitionFollower.longest_lease_ms`)
for the same reason.

Folds are shared per reader (one transport serves every candidate of a
worker) and per fold rule: `placement` and `challenge_stagger` change what a
fold counts as out of order. A shared fold is brought up to date only when a
candidate starts, and holds one `RoleState` per role of its partition, the
size of what each candidate holds for its own role.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Iterable
from dataclasses import dataclass

from krabka.errors import FormatError
from krabka.format.records import Kind, decode_key, decode_lease, role_of
from krabka.rules.evaluate import Placement
from krabka.rules.fold import RoleFold
from krabka.rules.state import Record, RoleState
from krabka.transport import PartitionRead, StateReader

__all__ = ["LONGEST_POSSIBLE_LEASE_MS", "FoldedTo", "SharedFold", "lease_length_ms",
           "shared_fold"]

# Kafka's default transaction.max.timeout.ms: no lease can be longer, so a
# record claiming more (a bad clock, a hostile writer) is counted as this.
LONGEST_POSSIBLE_LEASE_MS = 900_000


def lease_length_ms(record: Record) -> int | None:
    """The length of the lease `record` grants (capped), or None if it grants none."""
    if record.value is None:
        return None
    try:
        if decode_key(record.key).kind is not Kind.LEASE:
            return None
        lease = decode_lease(record.value)
    except FormatError:
        return None  # the fold reports malformed records
    return min(max(lease.deadline - lease.granted_at, 0), LONGEST_POSSIBLE_LEASE_MS)


@dataclass(frozen=True)
class FoldedTo:
    """A role's state as of one read of its partition, and where that read ended."""

    state: RoleState
    """A copy: the caller folds on from it."""
    next_offset: int
    """The offset after the last record folded."""
    read: PartitionRead
    """The read the state is folded to (its records are already folded)."""
    longest_lease_ms: int
    """The longest lease any role of the partition wrote up to that read."""


class SharedFold:
    """Every role's state on one partition, up to a stable offset."""

    def __init__(self, reader: StateReader, partition: int, placement: Placement | None,
                 challenge_stagger: float) -> None:
        self._reader = reader
        self.partition = partition
        self._placement = placement
        self._challenge_stagger = challenge_stagger
        self._folds: dict[str, RoleFold] = {}
        self._unattributed: list[Record] = []
        """Records whose key does not decode: every role's fold lists them."""
        self._next_offset = 0
        self._folded_to = 0
        self._longest_lease_ms = 0
        self._last: PartitionRead | None = None
        self._lock = asyncio.Lock()
        self._started = 0
        """How many reads were started; each read is numbered by this count as it began."""
        self._applied = -1
        """The number of the latest read applied."""

    async def role(self, role: str) -> FoldedTo:
        """`role`'s state as of a stable offset the partition reached no earlier
        than this call.

        Callers that arrive while a read is running share the next one: a
        thousand candidates starting together cost two reads.
        """
        called = self._started
        async with self._lock:
            # Read number `called` is the first that began after this call.
            if self._applied < called:
                number = self._started
                self._started += 1
                read = await self._reader.read_partition(self.partition, self._folded_to)
                self._apply(read)
                self._last, self._applied = read, number
            last = self._last
            assert last is not None, "a read was applied"
            return FoldedTo(self._fold(role).snapshot(), self._next_offset, last,
                            self._longest_lease_ms)

    def _apply(self, read: PartitionRead) -> None:
        self._fold_new(read.records)
        # As in `PartitionFollower`: a read holds every committed record from
        # where it began to its stable offset, and began at or below it.
        self._folded_to = max(self._folded_to, read.last_stable_offset)

    def _fold_new(self, records: Iterable[Record]) -> None:
        for record in records:
            if record.offset < self._next_offset:
                continue
            self._next_offset = record.offset + 1
            length = lease_length_ms(record)
            if length is not None:
                self._longest_lease_ms = max(self._longest_lease_ms, length)
            role = role_of(record.key)
            if role is None:
                self._unattributed.append(record)
                for fold in self._folds.values():
                    fold.apply(record)
                continue
            self._fold(role).apply(record)

    def _fold(self, role: str) -> RoleFold:
        fold = self._folds.get(role)
        if fold is None:
            fold = self._folds[role] = RoleFold(role, placement=self._placement,
                                                challenge_stagger=self._challenge_stagger)
            for record in self._unattributed:
                fold.apply(record)
        return fold


_Rule = tuple[int, Placement | None, float]
_shared: weakref.WeakKeyDictionary[StateReader, dict[_Rule, SharedFold]] = \
    weakref.WeakKeyDictionary()
"""Keyed by the reader itself: its folds go when it does."""


def shared_fold(reader: StateReader, partition: int, placement: Placement | None,
                challenge_stagger: float) -> SharedFold:
    """The fold of `partition` that every follower of `reader` with this rule shares."""
    folds = _shared.setdefault(reader, {})
    rule = (partition, placement, challenge_stagger)
    fold = folds.get(rule)
    if fold is None:
        fold = folds[rule] = SharedFold(reader, partition, placement, challenge_stagger)
    return fold

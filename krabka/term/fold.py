"""What a role's records on ``__coordination_terms`` say: the term fold.

Term mode's referee is the offset order of one partition (docs/term-mode.md#the-election-rule):

- A claim **wins** its term if its term is higher than every term claimed
  before it in offset order. So the first claim of a term wins it, a later
  claim of the same term loses, and a late claim of a term already passed
  loses too (terms follow one another and never overlap).
- The **holder** is the winner of the highest term claimed; the role was
  never claimed while that term is 0.
- A heartbeat counts when it comes from the holder, for the holder's term; a
  resign is such a heartbeat marked ``resigned``, and it is final for the
  term. A heartbeat of an earlier term is a deposed leader's and is ignored;
  so is one of a term above every claim read (its claim was settled and
  compacted away, and a later term's claim follows it).

- A tombstone of a claim is a **settled claim's**: the winner of a later
  term deleted it (`krabka.term.compaction`). It changes no verdict;
  the view forgets the claim (`TermView.claims`). A tombstone of a heartbeat
  or barrier key is an error.

The fold is pure and reads no clock; each member that folds the same records
in the same order gets the same view, and the verdict a claimant reads at
its own claim's offset is the one every later reader reaches, because
records after a claim never change who won its term. Compaction removes
only settled claims and keeps the latest heartbeat; the winning claim of the
highest term is never settled, so a member folding the compacted partition
(or one the cleaner is compacting as it reads) agrees on the highest term
and its holder (docs/term-mode.md#a-bounded-terms-topic), provided writers
keep the one rule the fold cannot check: a member claims a term at most
once (a second claim would share the first one's key, and compaction could
keep only the later, which may follow another member's claim).
`krabka.term.follower` keeps one current for a candidate and a leader.

`TermFold.apply` reports what a record changed (`TermElected`, `TermResigned`),
so a watcher turns records into events without comparing views;
`TermPartitionFold` folds every role of one partition, for readers of many
roles (a listing, a watch, the seeding of a `TermFilter`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from krabka.errors import FormatError
from krabka.format.partition import role_partition
from krabka.format.terms import (
    Heartbeat,
    TermKind,
    decode_claim,
    decode_heartbeat,
    decode_term_key,
)
from krabka.rules.state import Record

__all__ = [
    "TermChange",
    "TermClaim",
    "TermElected",
    "TermFold",
    "TermPartitionFold",
    "TermResigned",
    "TermView",
    "build_term_view",
]


@dataclass(frozen=True, slots=True)
class TermClaim:
    """The claim that won `term`: its claimant, offset and Kafka timestamp."""

    member: str
    term: int
    offset: int
    timestamp: int


@dataclass(slots=True)
class TermView:
    """Everything one role's records on the terms topic say.

    `term` is the highest term claimed (0: never claimed); `winners` maps each
    term that was won to its winning claim; `heartbeat` is the holder's latest
    heartbeat of `term`; `sign_offset` is the offset of the latest sign of
    life of `term` (its winning claim or a heartbeat), from which a follower
    runs its election timeout, and `sign_timestamp` that record's Kafka
    timestamp; `claims` maps (claimant, term) to the offset of every claim
    read and not tombstoned, won or lost (what a winner may settle);
    `errors` has one ``(offset, reason)`` per record skipped.
    """

    role: str
    term: int = 0
    winners: dict[int, TermClaim] = field(default_factory=dict)
    heartbeat: Heartbeat | None = None
    heartbeat_offset: int | None = None
    sign_offset: int | None = None
    sign_timestamp: int | None = None
    claims: dict[tuple[str, int], int] = field(default_factory=dict)
    errors: list[tuple[int, str]] = field(default_factory=list)

    @property
    def holder(self) -> str | None:
        """The winner of the highest term; None if the role was never claimed."""
        claim = self.winners.get(self.term)
        return claim.member if claim is not None else None

    @property
    def resigned(self) -> bool:
        """Whether the holder has resigned its term."""
        return self.heartbeat is not None and self.heartbeat.resigned

    def winner(self, term: int) -> TermClaim | None:
        """The claim that won `term`, or None if no claim won it (yet)."""
        return self.winners.get(term)


@dataclass(frozen=True, slots=True)
class TermElected:
    """`claim` won a new term; `previous` won the term before it (None for the
    role's first), and `previous_resigned` says whether its holder had resigned."""

    claim: TermClaim
    previous: TermClaim | None
    previous_resigned: bool

    @property
    def offset(self) -> int:
        """The winning claim's offset."""
        return self.claim.offset

    @property
    def timestamp(self) -> int:
        """The winning claim's Kafka timestamp."""
        return self.claim.timestamp


@dataclass(frozen=True, slots=True)
class TermResigned:
    """The holder of `claim`'s term resigned it, by the heartbeat at `offset`."""

    claim: TermClaim
    offset: int
    timestamp: int


TermChange = TermElected | TermResigned
"""What `TermFold.apply` reports; a heartbeat that only renews is none."""


class TermFold:
    """Folds one partition's term records, in offset order, into a `TermView`."""

    def __init__(self, role: str) -> None:
        self.view = TermView(role)

    def apply(self, record: Record) -> TermChange | None:
        """Fold one record; records of other roles change nothing.

        Returns the change it made to who holds the role, if any.
        """
        view = self.view
        try:
            key = decode_term_key(record.key)
        except FormatError as exc:
            # A key that does not decode names no role: every role's view lists it.
            view.errors.append((record.offset, str(exc)))
            return None
        if key.role != view.role:
            return None
        if not record.value:
            self._tombstone(record, key.kind, key.member, key.term)
            return None
        try:
            if key.kind is TermKind.CLAIM:
                return self._claim(record, record.value, key.member, key.term)
            if key.kind is TermKind.HEARTBEAT:
                return self._heartbeat(record, record.value)
            view.errors.append((record.offset, "a barrier key on the terms topic"))
        except FormatError as exc:
            view.errors.append((record.offset, str(exc)))
        return None

    def _tombstone(self, record: Record, kind: int, member: str, term: int) -> None:
        """A claim's tombstone forgets the claim; any other tombstone is an error.

        Writers tombstone only settled claims (below a term won before the
        tombstone), and the fold does not judge that: a reader whose read
        overlaps the cleaner may meet a tombstone after the later winning
        claim that justified it was removed, or with its own claim already
        gone, and the verdicts do not depend on it either way.
        """
        if kind is TermKind.CLAIM:
            self.view.claims.pop((member, term), None)
            return
        self.view.errors.append((record.offset, "a tombstone of a heartbeat or barrier key"))

    def _claim(self, record: Record, value: bytes, member: str,
               term: int) -> TermElected | None:
        claim = decode_claim(value)
        view = self.view
        if (claim.member, claim.term) != (member, term):
            view.errors.append((record.offset, (
                f"claim value names {claim.member!r} for term {claim.term},"
                f" its key {member!r} for term {term}")))
            return None
        view.claims[(member, term)] = record.offset
        if term <= view.term:
            return None  # loses: its term, or a higher one, was claimed first
        previous, previous_resigned = view.winners.get(view.term), view.resigned
        won = TermClaim(member, term, record.offset, record.timestamp)
        view.term = term
        view.winners[term] = won
        view.heartbeat = None
        view.heartbeat_offset = None
        view.sign_offset = record.offset
        view.sign_timestamp = record.timestamp
        return TermElected(won, previous, previous_resigned)

    def _heartbeat(self, record: Record, value: bytes) -> TermResigned | None:
        heartbeat = decode_heartbeat(value)
        view = self.view
        if heartbeat.term < view.term:
            return None  # a deposed leader's: its term is over
        if heartbeat.term > view.term:
            # Ahead of every claim read: its winning claim was settled by a later
            # winner and compacted away, while the heartbeat key kept this record.
            return None
        if heartbeat.member != view.holder:
            view.errors.append((record.offset, (
                f"heartbeat from {heartbeat.member!r} for term {heartbeat.term},"
                " which it did not win")))
            return None
        if view.resigned:
            return None  # a resign is final for its term
        view.heartbeat = heartbeat
        view.heartbeat_offset = record.offset
        view.sign_offset = record.offset
        view.sign_timestamp = record.timestamp
        if not heartbeat.resigned:
            return None
        return TermResigned(view.winners[view.term], record.offset, record.timestamp)


class TermPartitionFold:
    """Folds every role of one partition of a terms topic of `partitions` partitions.

    A role's view is its own `TermFold`'s, but for the keys that do not
    decode: they name no role, so they are listed once, in `errors`, rather
    than in every view. Records of a role that hashes to another partition
    are counted in `misplaced` and fold into no view: none of that role's
    members reads them, so they decide nothing.
    """

    def __init__(self, partition: int, partitions: int) -> None:
        if not 0 <= partition < partitions:
            raise ValueError(f"partition must be within 0..{partitions - 1}, got {partition}")
        self.partition = partition
        self.partitions = partitions
        self._folds: dict[str, TermFold] = {}
        self.errors: list[tuple[int, str]] = []
        self.misplaced = 0

    @property
    def views(self) -> dict[str, TermView]:
        """Every role with a record here, by name, to its view (live: do not keep it)."""
        return {role: fold.view for role, fold in sorted(self._folds.items())}

    def apply(self, record: Record) -> tuple[str, TermChange | None] | None:
        """Fold one record: its role and the change it made, or None if it names no role
        of this partition."""
        try:
            role = decode_term_key(record.key).role
        except FormatError as exc:
            self.errors.append((record.offset, str(exc)))
            return None
        if role_partition(role, self.partitions) != self.partition:
            self.misplaced += 1
            return None
        fold = self._folds.get(role)
        if fold is None:
            fold = self._folds[role] = TermFold(role)
        return role, fold.apply(record)


def build_term_view(role: str, records: Iterable[Record]) -> TermView:
    """Fold `records` (one partition's, in offset order) into `role`'s view."""
    fold = TermFold(role)
    for record in records:
        fold.apply(record)
    return fold.view

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
  term. A heartbeat of an earlier term is a deposed leader's and is ignored.

The fold is pure and reads no clock; each member that folds the same records
in the same order gets the same view, and the verdict a claimant reads at
its own claim's offset is the one every later reader reaches, because
records after a claim never change who won its term. Compaction keeps every
claim (each has its own key) and the latest heartbeat, so a member folding
the compacted partition agrees on the highest term and its holder, provided
writers keep the one rule the fold cannot check: a member claims a term at
most once (a second claim would share the first one's key, and compaction
could keep only the later, which may follow another member's claim).
`coordination.term_follower` keeps one current for a candidate and a leader.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from coordination.errors import FormatError
from coordination.state import Record
from coordination.term_records import (
    Heartbeat,
    TermKind,
    decode_claim,
    decode_heartbeat,
    decode_term_key,
)

__all__ = ["TermClaim", "TermFold", "TermView", "build_term_view"]


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
    runs its election timeout; `errors` has one ``(offset, reason)`` per
    record skipped.
    """

    role: str
    term: int = 0
    winners: dict[int, TermClaim] = field(default_factory=dict)
    heartbeat: Heartbeat | None = None
    heartbeat_offset: int | None = None
    sign_offset: int | None = None
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


class TermFold:
    """Folds one partition's term records, in offset order, into a `TermView`."""

    def __init__(self, role: str) -> None:
        self.view = TermView(role)

    def apply(self, record: Record) -> None:
        """Fold one record; records of other roles change nothing."""
        view = self.view
        try:
            key = decode_term_key(record.key)
        except FormatError as exc:
            # A key that does not decode names no role: every role's view lists it.
            view.errors.append((record.offset, str(exc)))
            return
        if key.role != view.role:
            return
        if not record.value:
            # Writers never delete a term record: a tombstone would let compaction
            # remove a claim, and with it the role's highest term.
            view.errors.append((record.offset, "a tombstone on the terms topic"))
            return
        try:
            if key.kind is TermKind.CLAIM:
                self._claim(record, record.value, key.member, key.term)
            elif key.kind is TermKind.HEARTBEAT:
                self._heartbeat(record, record.value)
            else:
                view.errors.append((record.offset, "a barrier key on the terms topic"))
        except FormatError as exc:
            view.errors.append((record.offset, str(exc)))

    def _claim(self, record: Record, value: bytes, member: str, term: int) -> None:
        claim = decode_claim(value)
        view = self.view
        if (claim.member, claim.term) != (member, term):
            view.errors.append((record.offset, (
                f"claim value names {claim.member!r} for term {claim.term},"
                f" its key {member!r} for term {term}")))
            return
        if term <= view.term:
            return  # loses: its term, or a higher one, was claimed first
        view.term = term
        view.winners[term] = TermClaim(member, term, record.offset, record.timestamp)
        view.heartbeat = None
        view.heartbeat_offset = None
        view.sign_offset = record.offset

    def _heartbeat(self, record: Record, value: bytes) -> None:
        heartbeat = decode_heartbeat(value)
        view = self.view
        if heartbeat.term < view.term:
            return  # a deposed leader's: its term is over
        if heartbeat.term > view.term or heartbeat.member != view.holder:
            view.errors.append((record.offset, (
                f"heartbeat from {heartbeat.member!r} for term {heartbeat.term},"
                " which it did not win")))
            return
        if view.resigned:
            return  # a resign is final for its term
        view.heartbeat = heartbeat
        view.heartbeat_offset = record.offset
        view.sign_offset = record.offset


def build_term_view(role: str, records: Iterable[Record]) -> TermView:
    """Fold `records` (one partition's, in offset order) into `role`'s view."""
    fold = TermFold(role)
    for record in records:
        fold.apply(record)
    return fold.view

"""Keeping ``__coordination_terms`` bounded by its roles, not by its claims.

Every claim has its own key, so compaction alone would keep every claim ever
made, and a reader of a role's partition (a standby, `describe_leadership`
in term mode, `highest_terms`) would read one more record per claim for
ever. So the winner of term t, once it has read its win, tombstones every
claim of its role of a term below t that it has read (`settled_claims`):
the losers and the winners of earlier terms. After compaction a role keeps
its latest winning claim, the claims after it, and its heartbeat key
(docs/term-mode.md#a-bounded-terms-topic).

Why terms never restart: a claim's tombstone is written only by the winner
of a higher term, after that winner's claim in offset order, and only of a
term below it. The winning claim of the highest term is therefore never
tombstoned, and compaction keeps it; every fold of the compacted partition
(or of one the cleaner is compacting as it is read) has that claim, which
still wins, because every claim before it had a lower term and removing
records before it cannot make any of them higher. And removing a claim
below the highest term changes no verdict at or after the winning claim:
the highest term won before any later claim is the same with it or without
it.

The tombstones are housekeeping: a failure to write them is logged and the
tenure goes on; the next winner settles what is left.
"""

from __future__ import annotations

import asyncio
import logging

from krabka.errors import TransportError
from krabka.format.terms import claim_key, encode_term_key
from krabka.term.fold import TermView
from krabka.transport import TermLog

__all__ = ["settle_claims", "settled_claims"]

log = logging.getLogger("krabka.leadership")


def settled_claims(view: TermView, term: int) -> list[tuple[str, int]]:
    """The claims of `view` that the winner of `term` may tombstone: every
    (claimant, term) read and not yet tombstoned whose term is below `term`."""
    return sorted(claim for claim in view.claims if claim[1] < term)


async def settle_claims(terms: TermLog, partition: int, view: TermView, term: int) -> int:
    """Tombstone `settled_claims(view, term)` on `partition`; how many were written.

    Call it as the winner of `term`, after reading the partition to the
    winning claim at least (so every tombstone follows it). The tombstones
    are sent together (the producer batches them). A `TransportError` is
    logged, not raised; any other error is a bug and propagates.
    """
    settled = settled_claims(view, term)
    if not settled:
        return 0
    sent = await asyncio.gather(
        *(terms.append_term(partition, encode_term_key(claim_key(view.role, member, old)), None)
          for member, old in settled),
        return_exceptions=True)
    failed = [outcome for outcome in sent if isinstance(outcome, BaseException)]
    for outcome in failed:
        if not isinstance(outcome, TransportError):
            raise outcome
    if failed:
        log.warning("%s: %d of %d settled claims were not tombstoned (%r); the next "
                    "winner tombstones them", view.role, len(failed), len(settled), failed[0])
    return len(settled) - len(failed)

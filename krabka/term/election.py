"""What a member does next in term mode, given the role's term view and the time.

The rules are in docs/term-mode.md#the-election-rule. `evaluate_term` is
pure, like `krabka.rules.evaluate.evaluate` for epoch mode, and shares its
ordering: the challengers are the roster (registration order, from the state
topic) without the holder, the holder last, one stagger apart
(`challenge_order`, `stagger_ms`). So the same member challenges first in
both modes, and a member that comes back never takes a role back.

The silence a follower waits out is measured on its own monotonic clock:
`quiet_since_ms` is the instant it read the latest sign of life of the
current term (`TermView.sign_offset` moved), or began reading if it has read
none. After the holder's resign, or when the role was never claimed, there
is no silence to wait out: the first challenger claims at once. Timing only
decides who tries when; the offset order of the claims decides who wins.
`krabka.term.candidate` is the election loop that calls it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from krabka.rules.evaluate import Placement, challenge_order, stagger_ms
from krabka.term.fold import TermView

__all__ = ["TermAction", "TermStep", "deposed", "evaluate_term"]

TermAction = Literal["register", "lead", "wait", "claim"]


@dataclass(frozen=True, slots=True)
class TermStep:
    """One decision: `action`, the instant `at_ms` it is due, and its `term`.

    claim: now, for `term` = the highest term seen + 1; wait: the claim
    instant, `term` the term it would claim then; lead: now, `term` the term
    held; register: now, `term` 0.
    """

    action: TermAction
    at_ms: int
    term: int


def deposed(view: TermView, term: int) -> bool:
    """Whether a leader of `term` has read a claim of a higher term: its tenure is over."""
    return view.term > term


def evaluate_term(
    view: TermView,
    roster: Sequence[str],
    member: str,
    now_ms: int,
    quiet_since_ms: int,
    election_timeout_ms: int,
    challenge_stagger: float,
    term: int = 0,
    *,
    role: str = "",
    placement: Placement = "registration",
) -> TermStep:
    """Decide `member`'s next step: lead, register, claim, or wait.

    Checked in this order: ``lead`` if `member` won `term` (never for 0), it
    is still the highest term and not resigned; ``register`` if `member` is
    not in `roster`; ``claim`` once `now_ms` reaches its slot; else ``wait``
    until the slot. The slot is ``quiet_since_ms + timeout + n * stagger``,
    n its place in `challenge_order`; the timeout is `election_timeout_ms`
    while a holder has not resigned, and 0 after a resign or for a role
    never claimed. A holder named `member` that is not leading `term` (a
    previous incarnation, or a second process with the same member id) makes
    `member` the holder for ranking, so it claims last. `role` and
    `placement` order the challengers as in epoch mode (`challenge_order`).
    """
    if election_timeout_ms < 0:
        raise ValueError(f"election_timeout_ms must not be negative, got {election_timeout_ms}")
    holder = view.holder
    if term >= 1 and view.term == term and holder == member and not view.resigned:
        return TermStep("lead", now_ms, term)
    if member not in roster:
        return TermStep("register", now_ms, 0)
    timeout = 0 if holder is None or view.resigned else election_timeout_ms
    n = challenge_order(roster, holder, member, role=role, placement=placement)
    slot = quiet_since_ms + timeout + n * stagger_ms(challenge_stagger)
    if now_ms >= slot:
        return TermStep("claim", now_ms, view.term + 1)
    return TermStep("wait", slot, view.term + 1)

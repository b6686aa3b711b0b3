"""What a member does next, given its role's state and the time.

The rules are in docs/design.md#the-election-rules.

`evaluate` is pure: the candidate loop calls it after every read and acts on
the returned `Step`. The rules give failover its order (challengers by rank,
one stagger apart, the holder last) and no failback (a re-registered member
goes to the tail). They decide timing only; the broker's epoch check decides
safety.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from coordination.state import RoleState
from coordination.token import NO_EPOCH, FencingToken

__all__ = ["Action", "Step", "challenge_order", "evaluate", "slot_of", "stagger_ms"]

Action = Literal["register", "lead", "wait", "challenge"]


@dataclass(frozen=True, slots=True)
class Step:
    """One decision: `action`, and the instant `at_ms` it is due.

    wait: the challenge instant; lead: the lease deadline;
    register and challenge: now.
    """

    action: Action
    at_ms: int


def stagger_ms(stagger: float) -> int:
    """The stagger in milliseconds, rounded half up (as the Go package rounds it)."""
    return math.floor(stagger * 1000 + 0.5)


def effective_deadline(state: RoleState) -> int | None:
    """The instant the current holder's claim ends, for ranking challengers.

    The lease deadline while a lease record is latest; in a vacancy, the Kafka
    timestamp of the tombstone that opened it; for a role never leased, the
    Kafka timestamp of roster[0]'s latest registration. None with no roster
    and no lease.
    """
    if state.lease is not None:
        return state.lease.deadline
    if state.vacant_since is not None:
        return state.vacant_since
    if state.entries:
        return state.entries[0].timestamp
    return None


def challenge_order(roster: Sequence[str], holder: str | None, member: str) -> int:
    """`member`'s place among the challengers: roster order without `holder`.

    The holder, and a member not in the roster, get ``len(challengers)`` and
    so come last. The one home of this rule for both fencing modes: term mode
    (`coordination.term_election`) passes the holder of the highest term.
    """
    challengers = [name for name in roster if name != holder]
    try:
        return challengers.index(member)
    except ValueError:
        return len(challengers)


def challenger_index(state: RoleState, member: str) -> int:
    """`member`'s place in the challenge order: roster order, the holder last.

    In a vacancy the member whose lease was cleared counts as the holder.
    """
    holder = state.holder if state.lease is not None else state.cleared_member
    return challenge_order(state.roster, holder, member)


def slot_of(state: RoleState, member: str, challenge_stagger: float) -> int | None:
    """The instant `member` may challenge: effective deadline + n staggers."""
    deadline = effective_deadline(state)
    if deadline is None:
        return None
    return deadline + challenger_index(state, member) * stagger_ms(challenge_stagger)


def evaluate(
    state: RoleState,
    member: str,
    now_ms: int,
    challenge_stagger: float,
    token: FencingToken = NO_EPOCH,
) -> Step:
    """Decide `member`'s next step: lead, register, challenge, or wait.

    Checked in this order: ``lead`` if the live lease names `member` and
    carries `token` (never for `NO_EPOCH`); ``register`` if `member` is not in
    the roster; ``challenge`` once `now_ms` reaches its slot; else ``wait``
    until the slot. A live lease that names `member` under another token (a
    previous incarnation, or a second process with the same member id) makes
    `member` the holder, so it ranks last and never churns epochs.
    """
    lease = state.lease
    if (
        lease is not None
        and token != NO_EPOCH
        and now_ms < lease.deadline
        and lease.member == member
        and FencingToken(lease.producer_id, lease.producer_epoch) == token
    ):
        return Step("lead", lease.deadline)
    _, ranked = state.rank_of(member)
    if not ranked:
        return Step("register", now_ms)
    slot = slot_of(state, member, challenge_stagger)
    if slot is None or now_ms >= slot:
        return Step("challenge", now_ms)
    return Step("wait", slot)

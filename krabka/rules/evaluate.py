"""What a member does next, given its role's state and the time.

The rules are in docs/design.md#the-election-rules.

`evaluate` is pure: the candidate loop calls it after every read and acts on
the returned `Step`. The rules give failover its order (challengers by rank,
one stagger apart, the holder last) and no failback (a re-registered member
goes to the tail). They decide timing only; the broker's epoch check decides
safety.

The placement policy decides the challengers' order and nothing else:
``registration`` ranks them by registration offset (the format's rule);
``balanced`` (this implementation's extension) by a rendezvous hash of role
and member, so the roles of a group spread over its members. This module is
the one home of both orders.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from krabka.format.partition import murmur2
from krabka.format.records import Lease
from krabka.format.token import NO_EPOCH, FencingToken
from krabka.rules.state import RoleState

__all__ = [
    "PLACEMENTS",
    "Action",
    "Placement",
    "Step",
    "challenge_order",
    "challengers",
    "check_placement",
    "evaluate",
    "first_slot",
    "ordered_challengers",
    "out_of_order_slot",
    "rendezvous_weight",
    "slot_of",
    "stagger_ms",
]

Action = Literal["register", "lead", "wait", "challenge"]
Placement = Literal["registration", "balanced"]
PLACEMENTS: tuple[Placement, ...] = get_args(Placement)

_LENGTH = struct.Struct(">h")


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


def check_placement(placement: str) -> Placement:
    """`placement` if it names a policy; a `ValueError` naming the choices otherwise."""
    for known in PLACEMENTS:
        if placement == known:
            return known
    raise ValueError(f"placement must be one of {', '.join(map(repr, PLACEMENTS))}, "
                     f"got {placement!r}")


def _string(text: str) -> bytes:
    data = text.encode("utf-8")
    return _LENGTH.pack(len(data)) + data


def rendezvous_weight(role: str, member: str) -> int:
    """`member`'s weight for `role` under ``balanced`` placement, 0 to 2**32 - 1.

    Kafka's murmur2 (`krabka.format.partition.murmur2`, the hash every
    implementation of the format already has for partitioning) of the role
    then the member, each as the record format writes a string (i16
    big-endian UTF-8 byte length, then the bytes), read as an unsigned 32-bit
    integer. The length prefixes keep ``("ab", "c")`` and ``("a", "bc")``
    apart. tests/unit/vectors/placement.json pins it for other implementations.
    """
    return murmur2(_string(role) + _string(member)) & 0xFFFFFFFF


def ordered_challengers(roster: Sequence[str], holder: str | None, *, role: str = "",
                        placement: Placement = "registration") -> list[str]:
    """The challengers in challenge order: `roster` without `holder`.

    ``registration``: roster (registration offset) order. ``balanced``:
    highest rendezvous weight for `role` first, equal weights by member name
    (UTF-8 bytes), so every reader of one roster gets one order whatever
    order its members registered in. The one home of the order for both
    fencing modes: term mode (`krabka.term.election`) passes the
    holder of the highest term.
    """
    names = [name for name in roster if name != holder]
    if placement == "balanced":
        if not role:
            raise ValueError("balanced placement orders the challengers of a role: "
                             "pass the role")
        names.sort(key=lambda name: (-rendezvous_weight(role, name), name.encode("utf-8")))
    return names


def challenge_order(roster: Sequence[str], holder: str | None, member: str, *,
                    role: str = "", placement: Placement = "registration") -> int:
    """`member`'s place among `ordered_challengers`.

    The holder, and a member not in the roster, get ``len(challengers)`` and
    so come last.
    """
    order = ordered_challengers(roster, holder, role=role, placement=placement)
    try:
        return order.index(member)
    except ValueError:
        return len(order)


def _holder_for_ranking(state: RoleState) -> str | None:
    # In a vacancy the member whose lease was cleared counts as the holder.
    return state.holder if state.lease is not None else state.cleared_member


def challengers(state: RoleState, placement: Placement = "registration") -> list[str]:
    """The role's challengers in challenge order (`ordered_challengers`)."""
    return ordered_challengers(state.roster, _holder_for_ranking(state), role=state.role,
                               placement=placement)


def challenger_index(state: RoleState, member: str,
                     placement: Placement = "registration") -> int:
    """`member`'s place in the role's challenge order, the holder (or anyone unranked) last."""
    return challenge_order(state.roster, _holder_for_ranking(state), member, role=state.role,
                           placement=placement)


def first_slot(state: RoleState, challenge_stagger: float,
               placement: Placement = "registration", *,
               seen_through: int | None = None) -> int | None:
    """The instant the first challenger in order may challenge.

    The effective deadline, except for a role never leased under
    ``balanced``: one stagger after the newest registration in the roster
    (of those at offsets up to `seen_through`, when given). Members of a
    group that start together register moments apart, and each reads the
    partition only up to its own registration at first: a member sees none
    registered after it. Under ``registration`` that is harmless (the first
    registered is first for everyone), but under ``balanced`` the member the
    hash prefers may be one an earlier member has not seen yet, and each
    would challenge at once: a herd of first tenures, each superseding the
    one before. Waiting one stagger past the newest registration lets the
    registrations of a group that starts together arrive, so every member
    ranks the same roster and only the preferred one's slot comes first.
    A role already leased, or vacant, is not affected: its members have
    long seen one another.
    """
    deadline = effective_deadline(state)
    if deadline is None:
        return None
    if placement == "balanced" and state.lease is None and state.vacant_since is None:
        newest = max(entry.timestamp for entry in state.entries
                     if seen_through is None or entry.offset <= seen_through)
        return newest + stagger_ms(challenge_stagger)
    return deadline


def slot_of(state: RoleState, member: str, challenge_stagger: float,
            placement: Placement = "registration") -> int | None:
    """The instant `member` may challenge: `first_slot` + n staggers."""
    first = first_slot(state, challenge_stagger, placement)
    if first is None:
        return None
    return first + challenger_index(state, member, placement) * stagger_ms(challenge_stagger)


def out_of_order_slot(state: RoleState, lease: Lease, challenge_stagger: float,
                      placement: Placement) -> int | None:
    """The winner's slot under `placement`, if `lease` was granted before it.

    `state` is the role just before `lease`, the first lease record of a new
    tenure. A member that follows `placement` and `challenge_stagger`
    challenges no earlier than its slot by its own clock, and `granted_at` is
    that clock read after the challenge was decided, so a lease granted
    earlier was ranked by other rules. Only the members ranked ahead of the
    winner that the winner must have seen count: those registered before its
    own registration or before the latest record under the lease key (it
    read past both to decide), not later ones. None when the lease was
    granted in order, or before the claim it replaced had ended (the winner
    read an older lease: not a ranking question), or when the winner is not
    registered.
    """
    deadline = effective_deadline(state)
    winner = state.entry_of(lease.member)
    if deadline is None or winner is None or lease.granted_at < deadline:
        return None
    seen_below = max(winner.offset, -1 if state.lease_offset is None else state.lease_offset)
    first = first_slot(state, challenge_stagger, placement, seen_through=seen_below)
    assert first is not None  # the winner is registered
    ahead = 0
    for name in challengers(state, placement):
        if name == lease.member:
            break
        entry = state.entry_of(name)
        if entry is not None and entry.offset < seen_below:
            ahead += 1
    slot = first + ahead * stagger_ms(challenge_stagger)
    return slot if lease.granted_at < slot else None


def evaluate(
    state: RoleState,
    member: str,
    now_ms: int,
    challenge_stagger: float,
    token: FencingToken = NO_EPOCH,
    placement: Placement = "registration",
) -> Step:
    """Decide `member`'s next step: lead, register, challenge, or wait.

    Checked in this order: ``lead`` if the live lease names `member` and
    carries `token` (never for `NO_EPOCH`); ``register`` if `member` is not in
    the roster; ``challenge`` once `now_ms` reaches its slot; else ``wait``
    until the slot. A live lease that names `member` under another token (a
    previous incarnation, or a second process with the same member id) makes
    `member` the holder, so it ranks last and never churns epochs.
    `placement` orders the challengers (`challengers`).
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
    slot = slot_of(state, member, challenge_stagger, placement)
    if slot is None or now_ms >= slot:
        return Step("challenge", now_ms)
    return Step("wait", slot)

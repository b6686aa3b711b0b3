"""The JSON shapes of tokens, rosters, leases and terms (docs/app.md#web-view).

The operator CLI and the worker's web view print the same objects; one
definition keeps the two from drifting apart.
"""

from __future__ import annotations

from typing import Any, Literal

from krabka.format.token import FencingToken, Token
from krabka.observe.status import TermStatus
from krabka.rules.state import RoleState

__all__ = [
    "Status",
    "lease_json",
    "out_of_order_json",
    "roster_json",
    "status_of",
    "summary_json",
    "term_json",
    "term_summary_json",
    "token_json",
]

Status = Literal["held", "lapsed", "vacant"]


def token_json(token: Token | None) -> dict[str, int] | None:
    """``{"producer_id", "producer_epoch"}`` for an epoch, ``{"term"}`` for a term,
    or None for no token: a reader tells the modes apart by the keys."""
    if token is None:
        return None
    if isinstance(token, FencingToken):
        return {"producer_id": token.producer_id, "producer_epoch": token.producer_epoch}
    return {"term": token.term}


def roster_json(state: RoleState) -> list[dict[str, Any]]:
    """``[{"member", "rank", "offset", "registered_at"}]`` in rank order."""
    return [
        {"member": e.member, "rank": rank, "offset": e.offset, "registered_at": e.registered_at}
        for rank, e in enumerate(state.entries)
    ]


def lease_json(state: RoleState) -> dict[str, Any] | None:
    """``{"member", "token", "tenure", "granted_at", "deadline"}``, or None when vacant."""
    lease = state.lease
    if lease is None:
        return None
    return {
        "member": lease.member,
        "token": token_json(state.token),
        "tenure": state.tenure,
        "granted_at": lease.granted_at,
        "deadline": lease.deadline,
    }


def out_of_order_json(state: RoleState) -> dict[str, Any]:
    """``{"count", "last"}``: tenures begun out of the reader's placement order.

    `last` is ``{"offset", "member", "granted_at", "slot", "placement"}`` or
    None. A count above 0 means the role's members mix placement policies
    (or challenge staggers).
    """
    last = state.last_out_of_order
    return {
        "count": state.out_of_order,
        "last": None if last is None else {
            "offset": last.offset, "member": last.member, "granted_at": last.granted_at,
            "slot": last.slot, "placement": last.placement,
        },
    }


def status_of(state: RoleState, now_ms: int) -> Status:
    """held while the latest lease is live at `now_ms`, lapsed after its deadline, else vacant.

    The deadline is the writer's clock and `now_ms` the reader's: a status
    read near a deadline is as good as the two clocks agree.
    """
    if state.lease is None:
        return "vacant"
    return "held" if now_ms < state.lease.deadline else "lapsed"


def summary_json(state: RoleState, now_ms: int) -> dict[str, Any]:
    """``{"role", "holder", "token", "deadline", "status", "members"}``: one role of a listing."""
    lease = state.lease
    return {
        "role": state.role,
        "holder": None if lease is None else lease.member,
        "token": token_json(state.token),
        "deadline": None if lease is None else lease.deadline,
        "status": status_of(state, now_ms),
        "members": len(state.entries),
    }


def term_json(status: TermStatus) -> dict[str, Any]:
    """``{"member", "token", "tenure", "claimed_at", "last_sign_at", "live", "resigned",
    "status", "election_timeout_ms"}``: a term-mode role's holder (`TermStatus`).

    `member`, `token`, `tenure`, `claimed_at` and `last_sign_at` are null for
    a role never claimed.
    """
    return {
        "member": status.holder,
        "token": token_json(status.token),
        "tenure": status.tenure,
        "claimed_at": status.claimed_at,
        "last_sign_at": status.last_sign_at,
        "live": status.live,
        "resigned": status.resigned,
        "status": status.status,
        "election_timeout_ms": status.election_timeout_ms,
    }


def term_summary_json(role: str, status: TermStatus | None, state: RoleState | None
                      ) -> dict[str, Any]:
    """``{"role", "holder", "token", "last_sign_at", "live", "resigned", "status",
    "members"}``: one term-mode role of a listing, from its terms partition
    (`status`, None for a role never claimed) and its roster (`state`, None
    for a role with no record on the state topic)."""
    return {
        "role": role,
        "holder": None if status is None else status.holder,
        "token": None if status is None else token_json(status.token),
        "last_sign_at": None if status is None else status.last_sign_at,
        "live": False if status is None else status.live,
        "resigned": False if status is None else status.resigned,
        "status": "vacant" if status is None else status.status,
        "members": 0 if state is None else len(state.entries),
    }

"""The JSON shapes of tokens, rosters and leases (docs/app.md#web-view).

The operator CLI and the worker's web view print the same objects; one
definition keeps the two from drifting apart.
"""

from __future__ import annotations

from typing import Any

from coordination.state import RoleState
from coordination.token import FencingToken

__all__ = ["lease_json", "roster_json", "token_json"]


def token_json(token: FencingToken | None) -> dict[str, int] | None:
    """``{"producer_id", "producer_epoch"}``, or None for no token."""
    if token is None:
        return None
    return {"producer_id": token.producer_id, "producer_epoch": token.producer_epoch}


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

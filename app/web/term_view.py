"""The web view's term-mode fields (docs/app.md#web-view), from a role's table value.

A term-mode role has no lease: its holder is the winner of the highest term
on ``__coordination_terms`` (`krabka.term.fold.TermView`, folded by the library's
`TermFold`), and its liveness is the age of the holder's latest sign of life
(the winning claim or a heartbeat), judged against the election timeout (the
worker's lease duration in term mode): a standby claims once the holder has
been silent that long. This module is the one home of that reading; the
summary and detail of `app.web.role_view` are epoch mode's, and a term-mode
worker's rows take these fields over them.
"""

from __future__ import annotations

from typing import Any

from agents.fold.role_value import RoleValue
from krabka.observe.json_forms import Status

__all__ = ["term_detail", "term_fields", "term_status"]


def term_status(value: RoleValue, now_ms: int, timeout_ms: int) -> Status:
    """held while the holder's last sign of life is younger than `timeout_ms`,
    lapsed after, vacant for a role never claimed or whose holder resigned."""
    view = value.terms
    if view is None or view.holder is None or view.resigned or value.sign_timestamp is None:
        return "vacant"
    return "held" if now_ms < value.sign_timestamp + timeout_ms else "lapsed"


def term_fields(value: RoleValue, now_ms: int, timeout_ms: int) -> dict[str, Any]:
    """The fields a term-mode row has in place of the lease's.

    ``holder`` is the highest term's winner (kept after it resigned, with
    ``resigned`` true and status vacant); ``token`` is ``{"term"}``;
    ``deadline`` is when the first standby may claim (last sign + timeout);
    ``heartbeat_age`` is ms since the last sign of life.
    """
    view = value.terms
    since = value.sign_timestamp
    term = 0 if view is None else view.term
    return {
        "fencing": "term",
        "holder": None if view is None else view.holder,
        "token": {"term": term} if term else None,
        "term": term or None,
        "deadline": None if since is None or term == 0 else since + timeout_ms,
        "status": term_status(value, now_ms, timeout_ms),
        "heartbeat_age": None if since is None or term == 0 else now_ms - since,
        "resigned": bool(view is not None and view.resigned),
    }


def term_detail(value: RoleValue, now_ms: int, timeout_ms: int) -> dict[str, Any]:
    """`term_fields` plus ``terms``: what the terms partition says of the role.

    ``terms`` is ``{"term", "tenure", "claimed_at", "heartbeat", "last_sign",
    "offset", "errors"}`` or None before any terms record: ``tenure`` is the
    winning claim's offset, ``heartbeat`` the holder's latest
    ``{"member", "term", "sent_at", "resigned"}``, ``last_sign``
    ``{"offset", "timestamp"}`` of the latest sign of life, ``offset`` the
    last terms record folded.
    """
    view = value.terms
    body = term_fields(value, now_ms, timeout_ms)
    if view is None:
        return {**body, "terms": None}
    claim = view.winner(view.term)
    heartbeat = view.heartbeat
    body["terms"] = {
        "term": view.term,
        "tenure": None if claim is None else claim.offset,
        "claimed_at": None if claim is None else claim.timestamp,
        "heartbeat": None if heartbeat is None else {
            "member": heartbeat.member, "term": heartbeat.term, "sent_at": heartbeat.sent_at,
            "resigned": heartbeat.resigned},
        "last_sign": None if view.sign_offset is None else {
            "offset": view.sign_offset, "timestamp": value.sign_timestamp},
        "offset": value.terms_offset,
        "errors": [{"offset": o, "reason": r} for o, r in view.errors],
    }
    return body

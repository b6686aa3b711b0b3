"""The operator CLI's table output: its JSON answers, laid out for a terminal.

Each renderer takes the JSON form a command prints with ``--output json``
(so both outputs come from one answer) and returns the text to print;
``watch`` prints each event's readable line (`krabka.observe.events.describe`). The
standard library has no table layout and the library depends on nothing
but aiokafka, so the few lines of column alignment are written here.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["EMPTY", "columns", "render", "term_text", "timestamp_text", "token_text", "yes_no"]

EMPTY = "-"
"""What a table shows for a null."""


def token_text(token: Mapping[str, Any] | None) -> str:
    """``producer_id/producer_epoch`` for an epoch, ``term N`` for a term, or `EMPTY`."""
    if token is None:
        return EMPTY
    if "term" in token:
        return f"term {token['term']}"
    return f"{token['producer_id']}/{token['producer_epoch']}"


def term_text(token: Mapping[str, Any] | None) -> str:
    """A term token's number, or `EMPTY`."""
    return EMPTY if token is None else str(token["term"])


def yes_no(flag: bool) -> str:
    """A flag as a table shows it."""
    return "yes" if flag else "no"


def timestamp_text(epoch_ms: int | None) -> str:
    """An epoch-ms instant as ISO 8601 UTC to the millisecond, or `EMPTY`."""
    if epoch_ms is None:
        return EMPTY
    at = datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.UTC)
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def columns(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """`rows` under `headers`, each column as wide as its widest cell; None shows `EMPTY`."""
    cells = [list(headers)] + [[EMPTY if cell is None else str(cell) for cell in row]
                               for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
                     .rstrip() for row in cells)


def _fields(pairs: Sequence[tuple[str, Any]]) -> str:
    return columns(("FIELD", "VALUE"), pairs).split("\n", 1)[1]


def _term_fields(term: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """A term-mode role's holder, as `term_json` gives it."""
    return [("holder", term["member"]), ("term", term_text(term["token"])),
            ("status", term["status"]), ("live", yes_no(term["live"])),
            ("resigned", yes_no(term["resigned"])), ("tenure", term["tenure"]),
            ("claimed at", timestamp_text(term["claimed_at"])),
            ("last sign", timestamp_text(term["last_sign_at"])),
            ("timeout", f"{term['election_timeout_ms'] / 1000:g} s")]


def _describe(body: Mapping[str, Any]) -> str:
    if body.get("fencing") == "term":
        return _fields([("role", body["role"]), ("partition", body["partition"]),
                        *_term_fields(body)])
    return _fields([("role", body["role"]), ("state", body["state"]),
                    ("token", token_text(body["token"]))])


def _state(body: Mapping[str, Any]) -> str:
    pairs: list[tuple[str, Any]] = [("role", body["role"]), ("partition", body["partition"])]
    skipped = [f"skipped offset {s['offset']}: {s['reason']}" for s in body["skipped"]]
    if body.get("fencing") == "term":
        pairs += _term_fields(body["term"])
        pairs.append(("terms skipped", len(body["terms_skipped"])))
        skipped += [f"skipped terms offset {s['offset']}: {s['reason']}"
                    for s in body["terms_skipped"]]
        return _state_text(body, pairs, skipped)
    lease = body["lease"]
    if lease is None:
        pairs.append(("holder", EMPTY))
    else:
        pairs += [("holder", lease["member"]), ("token", token_text(lease["token"])),
                  ("tenure", lease["tenure"]), ("granted at", timestamp_text(lease["granted_at"])),
                  ("deadline", timestamp_text(lease["deadline"]))]
    return _state_text(body, pairs, skipped)


def _state_text(body: Mapping[str, Any], pairs: list[tuple[str, Any]],
                skipped: list[str]) -> str:
    pairs = [*pairs, ("skipped", len(body["skipped"])), ("misplaced", body["misplaced"])]
    roster = columns(("RANK", "MEMBER", "OFFSET", "REGISTERED AT"), [
        (e["rank"], e["member"], e["offset"], timestamp_text(e["registered_at"]))
        for e in body["roster"]])
    return "\n\n".join([_fields(pairs), roster, *(["\n".join(skipped)] if skipped else [])])


def _fence(body: Mapping[str, Any]) -> str:
    return _fields([("role", body["role"]), ("fenced", token_text(body["fenced"])),
                    ("token", token_text(body["token"]))])


def _roles(body: Mapping[str, Any]) -> str:
    if body.get("fencing") == "term":
        return columns(("ROLE", "HOLDER", "TERM", "LAST SIGN", "STATUS", "MEMBERS"), [
            (row["role"], row["holder"], term_text(row["token"]),
             timestamp_text(row["last_sign_at"]), row["status"], row["members"])
            for row in body["roles"]])
    return columns(("ROLE", "HOLDER", "TOKEN", "DEADLINE", "STATUS", "MEMBERS"), [
        (row["role"], row["holder"], token_text(row["token"]), timestamp_text(row["deadline"]),
         row["status"], row["members"]) for row in body["roles"]])


def _create_topics(body: Mapping[str, Any]) -> str:
    return columns(("TOPIC", "OUTCOME"), [(row["topic"], row["outcome"])
                                          for row in body["topics"]])


_RENDERERS = {"describe": _describe, "state": _state, "fence": _fence, "roles": _roles,
              "create-topics": _create_topics}


def render(command: str, body: Mapping[str, Any]) -> str:
    """The table form of `command`'s JSON answer `body`."""
    return _RENDERERS[command](body)


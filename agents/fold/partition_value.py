"""The value of the ``partition_state`` table: what one state partition skipped
that no role owns.

Two kinds of record of ``__coordination_state`` cannot be folded into a role's
value: a key that does not decode (it names no role; docs/design.md#the-record-format has every role
of the partition report it) and a record whose role hashes to another
partition (writing that role's value from this partition would put a second
copy of it in the wrong changelog partition). Both are counted here, one value
per partition, keyed by the partition number as ASCII digits; the web view
merges the undecodable keys into every role of the partition.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import orjson

from agents.fold.role_value import MAX_ERRORS

__all__ = ["PartitionValue", "SkipKind", "decode", "encode", "partition_key"]

SCHEMA = 1
SkipKind = Literal["undecodable-key", "misplaced"]


@dataclass(slots=True)
class PartitionValue:
    """Counts and recent reasons of the partition's unattributable records.

    `key_errors` holds the recent undecodable keys (they belong in every
    role's error list); `misplaced_errors` the recent misplaced records.
    """

    partition: int
    undecodable: int = 0
    misplaced: int = 0
    key_errors: list[tuple[int, str]] = field(default_factory=list)
    misplaced_errors: list[tuple[int, str]] = field(default_factory=list)
    last_offset: int = -1

    def note(self, kind: SkipKind, offset: int, reason: str) -> None:
        """Count one skipped record (idempotent for an offset already applied)."""
        if offset <= self.last_offset:
            return
        self.last_offset = offset
        if kind == "undecodable-key":
            self.undecodable += 1
            self.key_errors = [*self.key_errors, (offset, reason)][-MAX_ERRORS:]
        else:
            self.misplaced += 1
            self.misplaced_errors = [*self.misplaced_errors, (offset, reason)][-MAX_ERRORS:]


def partition_key(partition: int) -> bytes:
    """The table key of `partition`'s value."""
    return str(partition).encode("ascii")


def encode(value: PartitionValue) -> bytes:
    """The table value bytes."""
    return orjson.dumps({
        "schema": SCHEMA,
        "partition": value.partition,
        "undecodable": value.undecodable,
        "misplaced": value.misplaced,
        "key_errors": [list(e) for e in value.key_errors],
        "misplaced_errors": [list(e) for e in value.misplaced_errors],
        "last_offset": value.last_offset,
    })


def decode(data: bytes) -> PartitionValue:
    """The value in `data`; raises `ValueError` for bytes this module did not write."""
    try:
        obj = orjson.loads(data)
        if obj.get("schema") != SCHEMA:
            raise ValueError(f"unsupported partition_state schema {obj.get('schema')!r}")
        return PartitionValue(
            partition=int(obj["partition"]),
            undecodable=int(obj["undecodable"]),
            misplaced=int(obj["misplaced"]),
            key_errors=[(int(o), str(r)) for o, r in obj["key_errors"]],
            misplaced_errors=[(int(o), str(r)) for o, r in obj["misplaced_errors"]],
            last_offset=int(obj["last_offset"]),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a partition_state value: {exc}") from None

"""Seeding a `TermFilter` from the terms topic, for a reader that starts at the end.

A reader that starts at the end of an output partition has not read the
barriers before its start, so its marks would be empty and the first
zombie record it meets would pass (docs/term-mode.md#seeding-a-reader-that-starts-at-the-end).
It seeds instead: each role's current highest term, read from the role's
partition of ``__coordination_terms`` and folded by the election rule's
fold (`krabka.term.describe.partition_highest_terms`, so the highest
term is the one the members agree on), becomes that role's mark on every
partition of the output topic
it reads. A role's barriers go to every partition of each output, so its
term applies to all of them.

The order is the caller's to keep: fix the start positions first, then
seed. Every barrier below those positions was written after its term's
claim, so reading the terms topic afterwards sees that claim.
"""

from __future__ import annotations

from collections.abc import Iterable

from krabka.format.partition import role_partition
from krabka.term.describe import partition_highest_terms
from krabka.term.filter import TermFilter
from krabka.transport import TermLog

__all__ = ["highest_terms", "seed_filter"]


async def highest_terms(
    terms: TermLog, partitions: int, roles: Iterable[str] | None = None
) -> dict[str, int]:
    """Each role's highest term claimed, by role, from a terms topic of `partitions` partitions.

    `roles` names the roles to read (only their partitions are read); None
    reads every partition and reports every role found in its own partition
    (a record of a role that hashes elsewhere decides nothing for it, so it
    is not counted). Roles never claimed are left out.
    """
    if partitions < 1:
        raise ValueError(f"partitions must be at least 1, got {partitions}")
    if isinstance(roles, str):
        raise TypeError(f"roles must be a collection of role names, not the string {roles!r}")
    wanted: dict[int, set[str]] | None = None
    if roles is not None:
        wanted = {}
        for role in roles:
            if not role:
                raise ValueError("a role name must not be empty")
            wanted.setdefault(role_partition(role, partitions), set()).add(role)
    highest: dict[str, int] = {}
    for partition in range(partitions) if wanted is None else sorted(wanted):
        found = await partition_highest_terms(terms, partition, partitions=partitions)
        for role, term in found.items():
            if wanted is None or role in wanted[partition]:
                highest[role] = term
    return highest


async def seed_filter(
    term_filter: TermFilter,
    terms: TermLog,
    terms_partitions: int,
    topic: str,
    topic_partitions: Iterable[int],
    roles: Iterable[str] | None = None,
) -> dict[str, int]:
    """Seed `term_filter` on each of `topic_partitions` with the highest terms; returns them.

    Call it after the reader's start positions are fixed (module docstring).
    `roles`, as in `highest_terms`: naming the roles that write `topic`
    keeps the saved marks small (every seeded role is saved with each
    partition's offset).
    """
    places = sorted(set(topic_partitions))
    highest = await highest_terms(terms, terms_partitions, roles)
    for partition in places:
        for role, term in highest.items():
            term_filter.seed(topic, partition, role, term)
    return highest

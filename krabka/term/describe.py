"""Reading term mode's authority from ``__coordination_terms``, for third parties
and operators.

Everything here reads a terms partition from its first offset to its end and
folds it (`krabka.term.fold`); nothing writes, registers or claims. The
terms topic is checked first (`TermLog.check_terms_topic`): with another
partition count than the writers', a role's records would be looked for in
the wrong partition. `describe_leadership(..., fencing="term")` comes here.
"""

from __future__ import annotations

from krabka import defaults
from krabka.clock import Clock, SystemClock
from krabka.format.partition import role_partition
from krabka.format.token import TermToken
from krabka.observe.status import TermStatus
from krabka.term.fold import TermFold, TermPartitionFold, TermView
from krabka.transport import TermLog

__all__ = ["describe_term_leadership", "describe_term_roles", "partition_highest_terms",
           "term_status"]


def term_status(view: TermView, partition: int, read_at: int,
                election_timeout_ms: int) -> TermStatus:
    """The `TermStatus` of `view`, judged at `read_at` (the reader's epoch ms)."""
    if election_timeout_ms < 1:
        raise ValueError(f"the election timeout must be positive, got {election_timeout_ms} ms")
    claim = view.winner(view.term)
    return TermStatus(
        role=view.role,
        partition=partition,
        token=None if claim is None else TermToken(claim.term),
        holder=None if claim is None else claim.member,
        tenure=None if claim is None else claim.offset,
        claimed_at=None if claim is None else claim.timestamp,
        last_sign_at=view.sign_timestamp,
        resigned=view.resigned,
        read_at=read_at,
        election_timeout_ms=election_timeout_ms,
        errors=tuple(view.errors),
    )


async def describe_term_leadership(
    log: TermLog, role: str, *, partitions: int = defaults.PARTITIONS,
    election_timeout: float = defaults.LEASE_DURATION, clock: Clock | None = None,
) -> TermStatus:
    """`role`'s highest term, its holder and whether its heartbeats are live.

    Reads the role's terms partition to its end. `election_timeout` (seconds)
    is the role's ``lease_duration``, which term mode uses as the election
    timeout; `clock` (the system's by default) is the reader's wall clock,
    against which the latest sign's Kafka timestamp is judged (`TermStatus`).
    """
    timeout_ms = _timeout_ms(election_timeout)
    await log.check_terms_topic(partitions)
    partition = role_partition(role, partitions)
    fold = TermFold(role)
    for record in (await log.read_terms(partition)).records:
        fold.apply(record)
    return term_status(fold.view, partition, (clock or SystemClock()).now_ms(), timeout_ms)


async def partition_highest_terms(log: TermLog, partition: int, *,
                        partitions: int = defaults.PARTITIONS) -> dict[str, int]:
    """The highest term won of every role of `partition`, read to its end.

    What a reader that starts at the end of a term-mode leader's output
    seeds its `TermFilter` with (``seed(topic, p, role, term)`` for each): the
    first zombie record it meets is then already stale. Roles whose records
    hash to another partition are left out (no member of theirs reads them).
    `krabka.term.seed.highest_terms` reads it for many partitions.
    """
    fold = await _read_partition(log, partition, partitions)
    return {role: view.term for role, view in fold.views.items() if view.term >= 1}


async def describe_term_roles(
    log: TermLog, partitions: int = defaults.PARTITIONS, *,
    election_timeout: float = defaults.LEASE_DURATION, clock: Clock | None = None,
) -> list[TermStatus]:
    """Every role with a record on the terms topic, by name, as
    `describe_term_leadership` gives it; every partition is read once.

    A role with registrations on the state topic but no term record is not
    listed here (`describe_roles` lists it).
    """
    timeout_ms = _timeout_ms(election_timeout)
    await log.check_terms_topic(partitions)
    reader_clock = clock or SystemClock()
    statuses: list[TermStatus] = []
    for partition in range(partitions):
        fold = await _read_partition(log, partition, partitions, checked=True)
        now = reader_clock.now_ms()
        statuses += [term_status(view, partition, now, timeout_ms)
                     for view in fold.views.values()]
    return sorted(statuses, key=lambda status: status.role)


async def _read_partition(log: TermLog, partition: int, partitions: int, *,
                          checked: bool = False) -> TermPartitionFold:
    fold = TermPartitionFold(partition, partitions)
    if not checked:
        await log.check_terms_topic(partitions)
    for record in (await log.read_terms(partition)).records:
        fold.apply(record)
    return fold


def _timeout_ms(seconds: float) -> int:
    if not seconds > 0:
        raise ValueError(f"election_timeout must be positive, got {seconds}")
    return max(1, round(seconds * 1000))

"""Reading a role's authority and state, for third parties and operators."""

from __future__ import annotations

from typing import Any, Literal, overload

from krabka import defaults
from krabka.clock import Clock
from krabka.errors import FormatError
from krabka.format.partition import role_partition
from krabka.format.records import decode_key
from krabka.observe.status import LeadershipStatus, TermStatus
from krabka.options import check_fencing
from krabka.rules.evaluate import Placement
from krabka.rules.fold import RoleFold, build_role_state
from krabka.rules.state import Record, RoleState
from krabka.term.describe import describe_term_leadership
from krabka.transport import Coordinator, StateReader, TermLog

__all__ = ["describe_leadership", "describe_role_state", "describe_roles"]


@overload
async def describe_leadership(source: Coordinator, role: str, *,
                              fencing: Literal["epoch"] = "epoch") -> LeadershipStatus: ...


@overload
async def describe_leadership(source: TermLog, role: str, *, fencing: Literal["term"],
                              partitions: int = defaults.PARTITIONS,
                              election_timeout: float = defaults.LEASE_DURATION,
                              clock: Clock | None = None) -> TermStatus: ...


async def describe_leadership(
    source: Any, role: str, *, fencing: str = "epoch", partitions: int | None = None,
    election_timeout: float | None = None, clock: Clock | None = None,
) -> LeadershipStatus | TermStatus:
    """`role`'s current token, as its referee says it now.

    Epoch mode (the default): the transaction coordinator's token, in one
    round trip (DescribeTransactions); a role no member has taken reports
    `NO_EPOCH`. ``describe_leadership(c, role).authoritative(token)`` is how
    a third party checks a writer.

    Term mode (``fencing="term"``, `source` a `TermLog`): reads the role's
    partition of the terms topic (of `partitions` partitions) to its end and
    returns a `TermStatus`: the highest term (`.token`, None if never
    claimed), its `.holder`, whether it `.resigned`, and whether its
    heartbeats are `.live`: the latest sign of life of the term (its claim
    or a heartbeat) is younger than `election_timeout` seconds (the role's
    ``lease_duration``), judged by that record's Kafka timestamp against
    `clock`'s wall clock (the system's by default), because a reader has no
    other clock to judge by. ``.authoritative(token)`` is equality with the
    highest term while its holder has not resigned.
    """
    if check_fencing(fencing) == "term":
        return await describe_term_leadership(
            source, role, partitions=defaults.PARTITIONS if partitions is None else partitions,
            election_timeout=(defaults.LEASE_DURATION if election_timeout is None
                              else election_timeout), clock=clock)
    given = [name for name, value in (("partitions", partitions),
                                      ("election_timeout", election_timeout),
                                      ("clock", clock)) if value is not None]
    if given:
        raise ValueError(f"{', '.join(given)}= belong to fencing='term'; epoch mode asks the "
                         "transaction coordinator, which needs neither")
    status: LeadershipStatus = await source.describe_epoch(role)
    return status


async def describe_role_state(
    reader: StateReader, role: str, partitions: int, *, placement: Placement | None = None,
    challenge_stagger: float = defaults.CHALLENGE_STAGGER,
) -> RoleState:
    """`role`'s roster, lease and skipped records, read to the last stable offset.

    Checks `partitions` against the state topic first. Records of the
    partition whose role hashes to another partition are counted in
    `RoleState.misplaced`. Given a `placement`, tenures begun out of its
    order are counted in `RoleState.out_of_order` (`RoleFold`).
    """
    await reader.check_topic(partitions, None)
    partition = role_partition(role, partitions)
    read = await reader.read_partition(partition)
    state = build_role_state(role, read.records, placement=placement,
                             challenge_stagger=challenge_stagger)
    state.misplaced = sum(
        1 for record in read.records if _misplaced(record.key, partition, partitions)
    )
    return state


async def describe_roles(reader: StateReader, partitions: int) -> list[RoleState]:
    """Every role with a record on the state topic, by name, each as
    `describe_role_state` gives it; every partition is read once.

    A role is listed from its own partition only: a record that hashes to
    another partition is counted in `RoleState.misplaced` of the roles of the
    partition it was read from, and names no role. An undecodable key is
    listed by every role of its partition, as `build_role_state` does.
    """
    await reader.check_topic(partitions, None)
    states: list[RoleState] = []
    for partition in range(partitions):
        records = (await reader.read_partition(partition)).records
        folds: dict[str, RoleFold] = {}
        undecodable: list[Record] = []
        misplaced = 0
        for record in records:
            try:
                role = decode_key(record.key).role
            except FormatError:
                undecodable.append(record)
                for each in folds.values():
                    each.apply(record)
                continue
            if role_partition(role, partitions) != partition:
                misplaced += 1
                continue
            fold = folds.get(role)
            if fold is None:
                # A role first seen here still lists the undecodable keys before it.
                fold = folds[role] = RoleFold(role)
                for earlier in undecodable:
                    fold.apply(earlier)
            fold.apply(record)
        for done in folds.values():
            done.state.misplaced = misplaced
            states.append(done.state)
    return sorted(states, key=lambda state: state.role)


def _misplaced(key: bytes, partition: int, partitions: int) -> bool:
    try:
        return role_partition(decode_key(key).role, partitions) != partition
    except FormatError:
        return False

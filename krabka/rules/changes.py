"""What one record of a role's partition changed in the role's state.

`RoleFold.apply` returns one of these per record it folds, or None when the
record is another role's or changed nothing (a registration tombstone of a
member that is not registered). Each names its source record (`offset`,
`timestamp`: the record's Kafka timestamp, epoch ms) and carries what a
reader of the change needs without the state before it: a subscriber turns
them into events, a standby into a wake-up.
"""

from __future__ import annotations

from dataclasses import dataclass

from krabka.format.records import Lease
from krabka.rules.state import RosterEntry

__all__ = [
    "Change",
    "Elected",
    "Joined",
    "Left",
    "Renewed",
    "Resigned",
    "Skipped",
    "StillVacant",
]


@dataclass(frozen=True, slots=True)
class Joined:
    """A registration: `entry`'s member is now last in the roster, at `rank`.

    A re-registration moves the member to the tail: `previous_rank` is where
    it was, None for a member that was not registered.
    """

    offset: int
    timestamp: int
    entry: RosterEntry
    rank: int
    previous_rank: int | None

    @property
    def member(self) -> str:
        """The registered member."""
        return self.entry.member


@dataclass(frozen=True, slots=True)
class Left:
    """A registration tombstone removed `member`, which was at `rank`."""

    offset: int
    timestamp: int
    member: str
    rank: int


@dataclass(frozen=True, slots=True)
class Elected:
    """A lease record with another token or member than the latest lease's,
    or after a vacancy: `lease` is the latest lease, `tenure` its tenure.

    `previous` is the lease before it: the latest lease (live or lapsed) or,
    in a vacancy, the one the tombstone cleared; None for the first lease.
    """

    offset: int
    timestamp: int
    lease: Lease
    tenure: int
    previous: Lease | None


@dataclass(frozen=True, slots=True)
class Renewed:
    """A lease record with the latest lease's token and member (live or
    lapsed): the tenure goes on, `lease` replaces `previous`."""

    offset: int
    timestamp: int
    lease: Lease
    previous: Lease


@dataclass(frozen=True, slots=True)
class Resigned:
    """A lease tombstone cleared `lease`, whose tenure was `tenure`: the role is vacant."""

    offset: int
    timestamp: int
    lease: Lease
    tenure: int


@dataclass(frozen=True, slots=True)
class StillVacant:
    """A lease tombstone with no lease to clear: the role stays vacant (a vacancy
    dates from the first such tombstone when no lease was ever cleared)."""

    offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class Skipped:
    """A malformed record, skipped with `reason` (the text in `RoleState.errors`)."""

    offset: int
    timestamp: int
    reason: str


Change = Joined | Left | Elected | Renewed | Resigned | StillVacant | Skipped
"""Everything `RoleFold.apply` reports; match on it exhaustively."""

"""What a role's referee says of it right now: the transaction coordinator in
epoch mode (`LeadershipStatus`), the role's terms partition in term mode
(`TermStatus`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from krabka.format.token import NO_EPOCH, FencingToken, TermToken, Token

__all__ = ["LeadershipStatus", "TermRoleStatus", "TermStatus"]


@dataclass(frozen=True, slots=True)
class LeadershipStatus:
    """The coordinator's current token for a role, and its transaction state.

    `state` is Kafka's transaction state name (``Empty``, ``Ongoing``,
    ``CompleteCommit``, ...) or ``"Unknown"`` for a role no member has taken,
    whose token is `NO_EPOCH`.
    """

    role: str
    token: FencingToken
    state: str

    def authoritative(self, token: FencingToken) -> bool:
        """Whether `token` is the role's current token; never for `NO_EPOCH`.

        Authority is equality, not order: a newer producer id can be
        numerically smaller than the one it replaced.
        """
        return token != NO_EPOCH and token == self.token


TermRoleStatus = Literal["held", "lapsed", "resigned", "vacant"]
"""held: the holder's latest sign of life is younger than the election
timeout; lapsed: it is not (a standby may claim now); resigned: the holder
resigned its term; vacant: no claim ever won a term of the role."""


@dataclass(frozen=True, slots=True)
class TermStatus:
    """What a role's partition of the terms topic says of it, read to its end.

    `token` is the highest term won (None: the role was never claimed) and
    `holder` its winner; `tenure` and `claimed_at` are the offset and Kafka
    timestamp of the winning claim. `last_sign_at` is the Kafka timestamp of
    the latest sign of life of that term (its claim or a heartbeat, a
    resign included). `live` is whether that sign is younger than
    `election_timeout_ms` at `read_at`, the reader's wall clock, and the
    holder has not resigned: a reader has no other clock to judge by, so the
    verdict is as good as that clock agrees with the record timestamps' (the
    writer's clock, or the broker's under ``LogAppendTime``). `errors` has one
    ``(offset, reason)`` per record of the role the fold skipped.
    """

    role: str
    partition: int
    token: TermToken | None
    holder: str | None
    tenure: int | None
    claimed_at: int | None
    last_sign_at: int | None
    resigned: bool
    read_at: int
    election_timeout_ms: int
    errors: tuple[tuple[int, str], ...] = ()

    @property
    def live(self) -> bool:
        """Whether the holder's heartbeats are live (see the class)."""
        if self.last_sign_at is None or self.resigned:
            return False
        return self.read_at - self.last_sign_at < self.election_timeout_ms

    @property
    def status(self) -> TermRoleStatus:
        """held, lapsed, resigned or vacant (`TermRoleStatus`)."""
        if self.token is None:
            return "vacant"
        if self.resigned:
            return "resigned"
        return "held" if self.live else "lapsed"

    def authoritative(self, token: Token) -> bool:
        """Whether `token` is the highest term and its holder has not resigned.

        Liveness is not asked: a silent holder's term stays the highest until
        a claim of a higher one, and until then every `TermFilter` passes its
        records. A `FencingToken` is never authoritative here.
        """
        return self.token is not None and not self.resigned and token == self.token

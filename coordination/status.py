"""What the transaction coordinator says of a role right now."""

from __future__ import annotations

from dataclasses import dataclass

from coordination.token import NO_EPOCH, FencingToken

__all__ = ["LeadershipStatus"]


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

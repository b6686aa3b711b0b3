"""Fencing tokens: the pair Kafka's transaction coordinator mints per role."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NO_EPOCH", "FencingToken"]


@dataclass(frozen=True, order=True, slots=True)
class FencingToken:
    """A leadership epoch: ``(producer_id, producer_epoch)``.

    Ordered producer id first, as the Go package compares it. The order is for
    display and sorting only: authority is equality with the coordinator's
    current token, because after epoch exhaustion or id expiry a newer producer
    id can be numerically smaller. Tenures, not tokens, order writers.
    """

    producer_id: int
    producer_epoch: int

    def __str__(self) -> str:
        return f"{self.producer_id}:{self.producer_epoch}"


NO_EPOCH = FencingToken(-1, -1)
"""The token of a role no member has taken; below every minted token."""

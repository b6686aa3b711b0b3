"""Fencing tokens: the pair Kafka's transaction coordinator mints per role (epoch
mode), or the term a role's claims on the terms topic settle (term mode)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NO_EPOCH", "FencingToken", "TermToken", "Token"]


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


@dataclass(frozen=True, order=True, slots=True)
class TermToken:
    """A term-mode tenure's token: the term it won (docs/term-mode.md).

    Unlike an epoch, a term is ordered: terms only grow, and a higher term
    supersedes every lower one. Nobody refuses a lower term's writes; readers
    that filter (`krabka.TermFilter`) drop them.
    """

    term: int

    def __str__(self) -> str:
        return f"term {self.term}"


Token = FencingToken | TermToken
"""A tenure's token in either fencing mode."""

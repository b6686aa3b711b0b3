"""The library's defaults: the one place each is written.

Every member of a group must agree on the state topic and its partition
count, so a default that two modules spelled separately could drift apart
and split a role across two topics or partitions. Everything else (the
options' dataclass, the worker's settings, the command line, the deploy
scripts) imports these.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "CHALLENGE_STAGGER",
    "FENCING",
    "LEASE_DURATION",
    "PARTITIONS",
    "PLACEMENT",
    "RENEW_INTERVAL",
    "STATE_TOPIC",
    "TERMS_TOPIC",
]

STATE_TOPIC: Final = "__coordination_state"
"""The compacted topic that holds every role's registrations and leases."""

TERMS_TOPIC: Final = "__coordination_terms"
"""The compacted topic that holds term mode's claims and heartbeats; it has the
state topic's partition count and partition rule."""

PARTITIONS: Final = 16
"""The state topic's partition count."""

LEASE_DURATION: Final = 30.0
"""Seconds a lease lasts after its record is written."""

RENEW_INTERVAL: Final = 10.0
"""Seconds between a leader's lease renewals."""

CHALLENGE_STAGGER: Final = 5.0
"""Seconds between successive standbys' challenges of a lapsed lease."""

PLACEMENT: Final = "registration"
"""How a role's challengers are ordered: by registration offset, the format's rule."""

FENCING: Final = "epoch"
"""How a deposed leader is fenced: by the broker, through transactional
producers (the format's rule); "term" is the log-as-referee mode for services
without transactions (docs/term-mode.md)."""

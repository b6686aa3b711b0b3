"""Leader election, leases and fencing tokens for active/standby work on Kafka.

Guaranteed:

- At most one member of a role holds the role's current fencing token: the
  producer epoch Kafka's transaction coordinator mints for
  ``transactional.id = <role>``. The quorum persists it and it only grows.
- The broker rejects every write a deposed leader makes through the role's
  fenced producer (`Leadership.transaction()`); nothing it sent becomes
  visible to read_committed readers. The cluster fences; safety never depends
  on the deposed leader noticing.
- Any process can ask, with one request, whether a token is authoritative
  (`describe_leadership`). Authority is equality with the current token.
- Successive tenures are ordered by `Leadership.tenure`, the offset of the
  tenure's first lease record, which strictly increases.
- Every record of a role lives in one partition of ``__coordination_state``,
  so rank (registration order) and the lease history have one total order.
- In term mode (``fencing="term"``, for services without transactions), at
  most one member wins each term: the first claim of the term in offset
  order on ``__coordination_terms``; terms only grow. A reader that applies
  `TermFilter` in offset order, with marks that survive its restarts, drops
  every record of a superseded term written after the newer term's barrier
  on that partition (docs/term-mode.md).

Not guaranteed:

- Side effects outside the role's producer (a database write, an HTTP call)
  are not fenced by the broker. Check `describe_leadership(...).authoritative`
  or stop at `Leadership.fence_deadline`.
- The lease adds no safety. It only decides when a standby stops waiting for
  a quiet holder; clock skew or a wrong lease moves failover time earlier or
  later, never to two authoritative writers.
- Tokens are not ordered across producer ids: a newer producer id can be
  numerically smaller. Order writers by tenure, not by token.
- Liveness needs a reachable transaction coordinator and a state topic whose
  partition count every member agrees on (checked at start-up).
- In term mode nobody refuses a deposed leader's writes: the broker accepts
  them, a reader that does not filter sees them, and a zombie's record
  written before the newer term's barrier on its partition stays valid.
- Rebalancing (`Rebalancer`) moves balanced roles by clean handovers only;
  which members are live is the caller's knowledge, not the log's.
- An `Admission` only delays its own member's challenge: a role whose every
  candidate is overloaded stays vacant until one admits again.

The package root holds what a program calls: `acquire_leadership` and
`LeaderRunner` with their options and states, `describe_leadership` and the
watches, `TermFilter`, the `Transport` seam and `KafkaTransport` with its
`Connection`, the many-role tools (`HeapSettler`, `Admission`, `Rebalancer`)
and the error tree under `CoordinationError`. The rest is imported from its
subpackage: the record formats from `krabka.format`, the election rules from
`krabka.rules`, term mode's parts from `krabka.term`, the Kafka adapter's
other names from `krabka.kafka`, and the in-memory broker and `ManualClock`
from `krabka.testing`.

``import krabka`` imports no aiokafka and changes no state of the process:
`KafkaTransport` and `Connection` load `krabka.kafka` (and with it aiokafka
and its version check) when first named. The package has no Faust import;
the worker application (``app``, ``agents``, ``tables``) builds on it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from krabka.acquire import acquire_leadership
from krabka.errors import (
    CompactedOutputError,
    ConfigurationError,
    CoordinationError,
    EpochLostError,
    FencedError,
    FormatError,
    InvalidStateError,
    OutcomeUnknownError,
    StateTopicError,
    TransportError,
    UndeclaredTopicError,
    UntestedVersionError,
)
from krabka.format.token import FencingToken, TermToken
from krabka.observe.describe import describe_leadership, describe_role_state, describe_roles
from krabka.observe.events import LeadershipEvent
from krabka.observe.status import LeadershipStatus, TermStatus
from krabka.observe.watch import RoleChange, watch_events, watch_roles
from krabka.options import LeadershipOptions
from krabka.runner import LeaderRunner, RoleFunction, RunnerObserver, RunnerState, TenureStop
from krabka.scale.admission import Admission, RenewalLatencyAdmission
from krabka.scale.heap import HeapSettler
from krabka.scale.rebalance import Rebalancer
from krabka.tenure import Leadership, TenureState
from krabka.term.filter import TermFilter
from krabka.transport import Transport

if TYPE_CHECKING:
    from krabka.kafka import Connection, KafkaTransport

__all__ = [
    "Admission",
    "CompactedOutputError",
    "ConfigurationError",
    "Connection",
    "CoordinationError",
    "EpochLostError",
    "FencedError",
    "FencingToken",
    "FormatError",
    "HeapSettler",
    "InvalidStateError",
    "KafkaTransport",
    "LeaderRunner",
    "Leadership",
    "LeadershipEvent",
    "LeadershipOptions",
    "LeadershipStatus",
    "OutcomeUnknownError",
    "Rebalancer",
    "RenewalLatencyAdmission",
    "RoleChange",
    "RoleFunction",
    "RunnerObserver",
    "RunnerState",
    "StateTopicError",
    "TenureState",
    "TenureStop",
    "TermFilter",
    "TermStatus",
    "TermToken",
    "Transport",
    "TransportError",
    "UndeclaredTopicError",
    "UntestedVersionError",
    "acquire_leadership",
    "describe_leadership",
    "describe_role_state",
    "describe_roles",
    "watch_events",
    "watch_roles",
]

# The Kafka adapter's names, loaded on first use: importing the adapter
# imports aiokafka and checks its version, which a program that only folds,
# describes or tests on `krabka.testing` must not pay for or fail on.
_ADAPTER = "krabka.kafka"
_LAZY = frozenset({"Connection", "KafkaTransport"})

if not TYPE_CHECKING:
    # Hidden from mypy, which would otherwise type every missing name as this
    # function's result; it reads the adapter's names from the import above.

    def __getattr__(name: str) -> object:
        if name not in _LAZY:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(_ADAPTER), name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(globals()) | _LAZY)

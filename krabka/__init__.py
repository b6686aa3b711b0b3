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

The package has no Faust import; the worker application (``app``, ``agents``,
``tables``) builds on it.
"""

from krabka.acquire import acquire_leadership
from krabka.clock import Clock, SystemClock
from krabka.defaults import STATE_TOPIC, TERMS_TOPIC
from krabka.epoch.candidate import FirstWrite
from krabka.epoch.tenure import EpochLeadership, GuardedWriter
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
)
from krabka.format.partition import murmur2, role_partition, to_positive
from krabka.format.records import (
    Key,
    Kind,
    Lease,
    Registration,
    decode_key,
    decode_lease,
    decode_registration,
    encode_key,
    encode_lease,
    encode_registration,
    lease_key,
    registration_key,
)
from krabka.format.terms import (
    TERM_HEADER,
    Barrier,
    Claim,
    Heartbeat,
    TermKey,
    TermKind,
    TermStamp,
    barrier_key,
    claim_key,
    decode_barrier,
    decode_claim,
    decode_heartbeat,
    decode_term_header,
    decode_term_key,
    encode_barrier,
    encode_claim,
    encode_heartbeat,
    encode_term_header,
    encode_term_key,
    heartbeat_key,
)
from krabka.format.token import NO_EPOCH, FencingToken, TermToken, Token
from krabka.kafka import (
    KafkaTransport,
    KafkaTransportError,
    KafkaUnavailableError,
    ProducerFatalError,
)
from krabka.observe.describe import describe_leadership, describe_role_state, describe_roles
from krabka.observe.events import LeadershipEvent
from krabka.observe.status import LeadershipStatus, TermRoleStatus, TermStatus
from krabka.observe.watch import RoleChange, RoleWatch, Since, watch_roles
from krabka.options import LeadershipOptions
from krabka.rules.changes import (
    Change,
    Elected,
    Joined,
    Left,
    Renewed,
    Resigned,
    Skipped,
    StillVacant,
)
from krabka.rules.evaluate import PLACEMENTS, Placement, Step, evaluate, rendezvous_weight
from krabka.rules.fold import RoleFold, build_role_state
from krabka.rules.state import OutOfOrder, Record, RoleState, RosterEntry
from krabka.runner import (
    LeaderRunner,
    RoleFunction,
    RunnerObserver,
    RunnerState,
    TenureStop,
)
from krabka.scale.admission import Admission, RenewalLatencyAdmission
from krabka.scale.rebalance import Move, Plan, Rebalancer, plan
from krabka.tenure import Leadership, TenureState
from krabka.term.describe import describe_term_roles, partition_highest_terms
from krabka.term.filter import TermFilter
from krabka.term.fold import TermChange, TermElected, TermPartitionFold, TermResigned
from krabka.term.seed import highest_terms, seed_filter
from krabka.term.tenure import TermLeadership, TermWriter
from krabka.term.watch import watch_term_events
from krabka.transport import (
    Coordinator,
    GuardedTransaction,
    LeaseWriter,
    PartitionRead,
    PartitionTail,
    Registrar,
    StateReader,
    TopicCheck,
    TopicFacts,
    Transport,
)

__all__ = [
    "NO_EPOCH",
    "PLACEMENTS",
    "STATE_TOPIC",
    "TERMS_TOPIC",
    "TERM_HEADER",
    "Admission",
    "Barrier",
    "Change",
    "Claim",
    "Clock",
    "CompactedOutputError",
    "ConfigurationError",
    "CoordinationError",
    "Coordinator",
    "Elected",
    "EpochLeadership",
    "EpochLostError",
    "FencedError",
    "FencingToken",
    "FirstWrite",
    "FormatError",
    "GuardedTransaction",
    "GuardedWriter",
    "Heartbeat",
    "InvalidStateError",
    "Joined",
    "KafkaTransport",
    "KafkaTransportError",
    "KafkaUnavailableError",
    "Key",
    "Kind",
    "LeaderRunner",
    "Leadership",
    "LeadershipEvent",
    "LeadershipOptions",
    "LeadershipStatus",
    "Lease",
    "LeaseWriter",
    "Left",
    "Move",
    "OutOfOrder",
    "OutcomeUnknownError",
    "PartitionRead",
    "PartitionTail",
    "Placement",
    "Plan",
    "ProducerFatalError",
    "Rebalancer",
    "Record",
    "Registrar",
    "Registration",
    "RenewalLatencyAdmission",
    "Renewed",
    "Resigned",
    "RoleChange",
    "RoleFold",
    "RoleFunction",
    "RoleState",
    "RoleWatch",
    "RosterEntry",
    "RunnerObserver",
    "RunnerState",
    "Since",
    "Skipped",
    "StateReader",
    "StateTopicError",
    "Step",
    "StillVacant",
    "SystemClock",
    "TenureState",
    "TenureStop",
    "TermChange",
    "TermElected",
    "TermFilter",
    "TermKey",
    "TermKind",
    "TermLeadership",
    "TermPartitionFold",
    "TermResigned",
    "TermRoleStatus",
    "TermStamp",
    "TermStatus",
    "TermToken",
    "TermWriter",
    "Token",
    "TopicCheck",
    "TopicFacts",
    "Transport",
    "TransportError",
    "UndeclaredTopicError",
    "acquire_leadership",
    "barrier_key",
    "build_role_state",
    "claim_key",
    "decode_barrier",
    "decode_claim",
    "decode_heartbeat",
    "decode_key",
    "decode_lease",
    "decode_registration",
    "decode_term_header",
    "decode_term_key",
    "describe_leadership",
    "describe_role_state",
    "describe_roles",
    "describe_term_roles",
    "encode_barrier",
    "encode_claim",
    "encode_heartbeat",
    "encode_key",
    "encode_lease",
    "encode_registration",
    "encode_term_header",
    "encode_term_key",
    "evaluate",
    "heartbeat_key",
    "highest_terms",
    "lease_key",
    "murmur2",
    "partition_highest_terms",
    "plan",
    "registration_key",
    "rendezvous_weight",
    "role_partition",
    "seed_filter",
    "to_positive",
    "watch_roles",
    "watch_term_events",
]

"""The seam between the protocol and the broker: six small protocols.

`KafkaTransport` implements them on a real cluster and `MemoryTransport` in
process, for unit tests and deterministic simulation. The leadership logic
sees only these methods, so what it relies on of Kafka is written here.
Epoch mode uses the first four; term mode (docs/term-mode.md) uses
`StateReader` and `Registrar` for the roster, and `TermLog` and
`OutputWriter` instead of the transaction coordinator.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

from krabka.format.token import FencingToken
from krabka.observe.status import LeadershipStatus
from krabka.rules.state import Record
from krabka.topic_policy import TopicCheck, TopicFacts

__all__ = [
    "Coordinator",
    "GuardedTransaction",
    "LeaseWriter",
    "OutputWriter",
    "PartitionRead",
    "PartitionTail",
    "Registrar",
    "StateReader",
    "TermLog",
    "TopicCheck",
    "TopicFacts",
    "Transport",
    "require_key_or_value",
    "require_offset",
]


@dataclass(frozen=True, slots=True)
class PartitionRead:
    """Committed records of one partition, and where its log stood.

    `records` are in offset order and end below `last_stable_offset`; a
    stable offset below `high_watermark` means a transaction is open on the
    partition and hides everything after its first record.
    """

    records: list[Record]
    last_stable_offset: int
    high_watermark: int


class Coordinator(Protocol):
    """Kafka's transaction coordinator, which mints and reports epochs."""

    async def acquire_epoch(
        self, role: str, transaction_timeout: float, current: FencingToken | None = None
    ) -> FencingToken:
        """Run InitProducerId for ``transactional.id = role`` and keep the producer.

        The epoch binds to that producer; `LeaseWriter` writes through it.
        With `current`, the bump is conditional (KIP-360): it happens only
        while `current` is the coordinator's token, else `FencedError`; the
        producer that held `current` (if this transport has it) then holds
        the new token, so a resignation can clear its lease under an epoch
        no longer authoritative for anyone.
        """
        ...

    async def prepare_epoch(self, role: str, transaction_timeout: float, partition: int,
                            outputs: Collection[str] = (), *, wait: bool = False) -> None:
        """Get ready for a later `acquire_epoch` of `role`; mint nothing.

        A standby first in line calls it while it waits, so that its
        challenge waits only for InitProducerId (on Kafka: the producer is
        connected, the role's coordinator found, `partition`'s leader
        reached), and its first guarded write to one of `outputs` for no
        metadata (on Kafka: their metadata read, their leaders reached; a
        missing output is no error). It returns at once. It raises only what any call of the
        transport raises before it starts (a bad timeout, a closed
        transport, a missing state topic); the preparation itself runs in
        the background, and one that failed or is not ready is simply not
        used. No epoch moves, so nobody is fenced.

        With `wait`, it returns once the preparation has ended (well or
        not): a challenger calls it so, then reads the partition a last time
        and decides, so that only InitProducerId stands between that read and
        the epoch it mints. What it prepared is then kept, whatever the
        transport's limits, until `acquire_epoch` takes it or
        `discard_prepared` gives it up.
        """
        ...

    async def discard_prepared(self, role: str) -> None:
        """Give up what `prepare_epoch` got ready for `role`, if anything."""
        ...

    async def describe_epoch(self, role: str) -> LeadershipStatus:
        """The coordinator's current token for `role` (DescribeTransactions)."""
        ...


class PartitionTail(Protocol):
    """A read_committed follower of one partition."""

    async def next(self) -> PartitionRead:
        """Wait until the partition changes; return the new committed records.

        Returns when records became committed past the previous position, or
        when the stable offset or high watermark moved (a tail of one role:
        only when records of its role became committed). Cancelling it loses
        nothing.
        """
        ...

    def returned_to(self) -> int:
        """A stable offset below which every record this tail's reads hold has
        been returned by `next()`: a reader that applied every read it got has
        them all. A tail of one role moves it past other roles' records
        without returning anything, so such a reader need not read them again.
        """
        ...

    async def close(self) -> None:
        """Stop following."""
        ...


class StateReader(Protocol):
    """Reads ``__coordination_state`` with read_committed isolation."""

    async def read_partition(self, partition: int, from_offset: int = 0) -> PartitionRead:
        """Every committed record from `from_offset` to the last stable offset.

        The read starts after the call, so its stable offset is one the
        partition reached no earlier than the call. A reader that already
        folded everything below some stable offset passes it as
        `from_offset` and gets only what is new: the records a read from
        offset 0 would return at and after `from_offset`. A negative
        `from_offset` is a `ValueError` (`require_offset`).
        """
        ...

    async def tail(self, partition: int, from_offset: int, *,
                   role: str | None = None) -> PartitionTail:
        """Follow `partition` from `from_offset`.

        With `role`, the tail's reads hold only the records of `role` and
        those whose key does not decode (`records.role_of`: the records a
        fold of `role` folds), and `next()` returns only once there is such a
        record: other roles' records and marks that moved alone wake nobody.
        A waiting candidate follows its role so: on a partition of hundreds
        of roles, it would otherwise wake at every renewal of every one of
        them. Each read's marks are still the partition's, and every record
        of `role` below a read's stable offset is in that read or an earlier one.
        """
        ...

    async def topic_facts(self) -> TopicFacts:
        """What the cluster says of the state topic and its brokers."""
        ...

    async def check_topic(self, partitions: int, lease_duration: float | None) -> TopicCheck:
        """Refuse to run on a state topic that would break the protocol.

        Applies `krabka.topic_policy.StateTopicPolicy` to `topic_facts`:
        `StateTopicError` naming the fix when the topic is missing, not
        exactly ``cleanup.policy=compact``, has another partition count than
        `partitions`, or the broker's ``transaction.max.timeout.ms`` is below
        `lease_duration` (not checked when None: a reader holds no lease).
        """
        ...


class Registrar(Protocol):
    """Appends registrations through a plain idempotent producer."""

    async def append(self, partition: int, key: bytes, value: bytes | None) -> int:
        """Write one record to the state topic at `partition`; return its offset."""
        ...


class GuardedTransaction(Protocol):
    """One open Kafka transaction of a role's fenced producer."""

    async def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
    ) -> None:
        """Add a record to the transaction; it is visible only once committed."""
        ...

    async def write_lease(self, partition: int, key: bytes, value: bytes | None) -> int:
        """Add a lease record to the state topic; return its offset."""
        ...

    async def commit(self) -> None:
        """Commit; `FencedError` if the role's epoch moved on."""
        ...

    async def abort(self) -> None:
        """Abort; nothing sent in the transaction becomes visible.

        A no-op once the transaction ended (committed, aborted or abandoned).
        """
        ...

    def abandon(self) -> None:
        """Give the transaction up without waiting (its caller was cancelled).

        The transport aborts it before the producer's next transaction or
        conditional bump; until then, or until the coordinator aborts it at
        its timeout, it stays open.
        """
        ...


class LeaseWriter(Protocol):
    """Writes through the producer `Coordinator.acquire_epoch` bound.

    Every call names the role and the token the caller's tenure holds. A
    transport whose producer for the role holds another token (a newer
    tenure of this process) or none raises `FencedError` and touches
    nothing, so a late call of an old tenure can never write through, or
    close, a newer tenure's producer. Every write raises `FencedError` if the
    epoch moved on, and `EpochLostError` once the producer can no longer
    write under the epoch (failed fatally or closed); a failure that may
    pass is a `TransportError`. A lease record in a transaction of its own
    is composed from these by the core (`krabka.guarded.commit_lease`).
    """

    async def begin_transaction(self, role: str, token: FencingToken) -> GuardedTransaction:
        """Open a transaction on `role`'s fenced producer, which must hold `token`."""
        ...

    async def release(self, role: str, token: FencingToken) -> None:
        """Close `role`'s fenced producer, which must hold `token`."""
        ...


class TermLog(Protocol):
    """Term mode's referee: ``__coordination_terms``, through a plain idempotent producer.

    No transactional producer and no InitProducerId: what a claim wins is
    settled by the offset order of the role's partition alone.
    """

    async def append_term(self, partition: int, key: bytes, value: bytes | None) -> int:
        """Write one term record at `partition`; return its offset once acknowledged.

        A None value is a tombstone: only of a settled claim
        (`krabka.term.compaction`).
        """
        ...

    async def read_terms(self, partition: int) -> PartitionRead:
        """Every record of `partition` from its first offset to its end.

        Nothing on the terms topic is transactional, so the end is the high
        watermark (and so is the stable offset).
        """
        ...

    async def tail_terms(self, partition: int, from_offset: int, *,
                         role: str | None = None) -> PartitionTail:
        """Follow the terms topic's `partition` from `from_offset`.

        With `role`, only that role's term records and those whose key does
        not decode are returned, and only they wake the tail (as
        `StateReader.tail` with ``role``).
        """
        ...

    async def check_terms_topic(self, partitions: int) -> TopicCheck:
        """Refuse to run on a terms topic that would break term mode.

        `StateTopicError` naming the fix when the topic is missing, not
        exactly ``cleanup.policy=compact`` (a delete policy would lose claims,
        and terms must never restart), or has another partition count than
        `partitions` (the state topic's).
        """
        ...


class OutputWriter(Protocol):
    """A term-mode leader's writes to its declared output topics.

    Idempotent, not transactional: each record is written once and in order
    per partition, and what was acknowledged stays written whatever happens
    to the leader; readers drop a superseded term's records by its header.
    """

    async def output_partitions(self, topic: str) -> int:
        """How many partitions `topic` has now (a missing topic is a `TransportError`)."""
        ...

    async def output_facts(self, topic: str) -> TopicFacts:
        """What the cluster says of `topic` (its ``cleanup.policy`` above all).

        A missing topic is facts with ``exists=False``, not an error.
        """
        ...

    async def write_output(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]],
    ) -> int:
        """Write one record to `topic`'s `partition`; return its offset once acknowledged.

        Headers keep their order and duplicates. A record with neither key nor
        value is a `ValueError` (`require_key_or_value`).
        """
        ...


def require_key_or_value(key: bytes | None, value: bytes | None) -> None:
    """`ValueError` for a record with neither a key nor a value.

    Kafka's log would take one, but the Java and aiokafka producers refuse
    it, so no transport may accept what the real one cannot send.
    """
    if key is None and value is None:
        raise ValueError("a record needs a key or a value (both are None)")


def require_offset(from_offset: int) -> None:
    """`ValueError` for an offset no partition has (below 0, or not an int)."""
    if isinstance(from_offset, bool) or not isinstance(from_offset, int) or from_offset < 0:
        raise ValueError(f"an offset is an int of at least 0, got {from_offset!r}")


class Transport(Coordinator, StateReader, Registrar, LeaseWriter, TermLog, OutputWriter,
                Protocol):
    """All six protocols: what `acquire_leadership` needs, in either fencing mode."""

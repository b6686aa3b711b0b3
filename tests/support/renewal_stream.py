"""A recorded ``__coordination_state`` as a cluster writes it: roles renewed in
round-robin (so the roles of a partition interleave), every write its own
transaction (so offsets skip commit markers), with the rarer records among
the renewals: fences (a new holder, a new token), resigns (lease tombstones),
lapses (a holder silent past its deadline, revealed by the role's next
record), members joining and leaving, malformed values, undecodable keys and
records of a role written to another role's partition.

Deterministic for a seed, built in-process with the record codec: no broker.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from krabka.format.partition import role_partition
from krabka.format.records import (
    Lease,
    Registration,
    encode_key,
    encode_lease,
    encode_registration,
    lease_key,
    registration_key,
)
from krabka.rules.state import Record

__all__ = ["RecordedTopic", "record_topic"]

LEASE_MS = 3_000
MEMBERS = ("m-0.example:6066", "m-1.example:6066", "m-2.example:6066")


@dataclass
class RecordedTopic:
    """The topic's records, ``(partition, record)`` in the order a consumer of
    every partition could fetch them (the partitions interleaved)."""

    partitions: int
    records: list[tuple[int, Record]] = field(default_factory=list)


@dataclass
class _Role:
    name: str
    partition: int
    holder: str | None = None
    token: tuple[int, int] = (0, 0)
    deadline: int = 0
    registered: set[str] = field(default_factory=set)
    silent: int = 0
    """Rounds the holder still skips (a lapse in the making)."""


def record_topic(records: int, *, roles: int, partitions: int, seed: int = 1) -> RecordedTopic:
    """At least `records` state records of `roles` roles over `partitions` partitions."""
    rng = random.Random(seed)
    topic = RecordedTopic(partitions)
    offsets = [0] * partitions
    now = 1_700_000_000_000
    names = [f"acme.role-{i:05d}" for i in range(roles)]
    state = [_Role(name, role_partition(name, partitions)) for name in names]
    producer_ids = iter(range(5_000, 10**9))

    def write(partition: int, key: bytes, value: bytes | None) -> None:
        topic.records.append((partition, Record(offsets[partition], key, value, now)))
        # Its own transaction: the commit marker takes the next offset.
        offsets[partition] += 2

    def lease(role: _Role, member: str, token: tuple[int, int]) -> None:
        role.holder, role.token, role.deadline = member, token, now + LEASE_MS
        write(role.partition, encode_key(lease_key(role.name)),
              encode_lease(Lease(member, token[0], token[1], now, role.deadline)))

    while len(topic.records) < records:
        for role in state:
            now += 1
            draw = rng.random()
            if not role.registered or draw < 0.01:
                member = rng.choice(MEMBERS)
                role.registered.add(member)
                write(role.partition, encode_key(registration_key(role.name, member)),
                      encode_registration(Registration(member, now)))
            elif draw < 0.015:
                member = rng.choice(sorted(role.registered))
                role.registered.discard(member)
                write(role.partition, encode_key(registration_key(role.name, member)),
                      rng.choice((None, b"")))
            elif role.silent:
                role.silent -= 1  # the holder writes nothing this round
            elif role.holder is None or draw < 0.03:
                # A challenger fences the holder: a new producer id, or the next epoch.
                member = rng.choice(MEMBERS)
                token = ((next(producer_ids), 0) if member != role.holder or rng.random() < 0.5
                         else (role.token[0], role.token[1] + 1))
                lease(role, member, token)
            elif draw < 0.04:
                role.holder = None
                write(role.partition, encode_key(lease_key(role.name)), rng.choice((None, b"")))
            elif draw < 0.05:
                role.silent = 4  # long enough for the deadline to pass
            elif draw < 0.055:
                write(role.partition, encode_key(lease_key(role.name)), rng.randbytes(9))
            elif draw < 0.057:
                write(role.partition, rng.randbytes(7), b"")
            elif draw < 0.059:
                other = rng.choice(state)
                if other.partition != role.partition:
                    write(role.partition, encode_key(lease_key(other.name)),
                          encode_lease(Lease(MEMBERS[0], 1, 0, now, now + LEASE_MS)))
            else:
                lease(role, role.holder, role.token)  # a renewal
    return topic

"""Kafka's key partitioning, applied to role names.

Every record of a role (registrations and leases, whose keys differ) must land
in one partition so the role's records carry one total order. Both producers
therefore pin the partition computed here; no partitioner runs. Term mode's
``__coordination_terms`` has the same partition count and uses the same rule,
so a role's claims and heartbeats also share one partition.
"""

from __future__ import annotations

import struct

__all__ = ["murmur2", "role_partition", "to_positive"]

_MASK = 0xFFFFFFFF
_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_WORDS = struct.Struct("<I")


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` of `data`, as Java's signed 32-bit int.

    Written here from Kafka's algorithm so that the core needs no Kafka client:
    aiokafka has the same hash (returned unsigned) but is only the adapter's
    dependency, and the ``mmh3`` package implements MurmurHash3, a different
    hash. Kafka's seed and its little-endian word order make this murmur2
    variant Kafka's own; the golden vectors and the conformance test against
    Kafka's Java ``Utils`` pin it. Java's int arithmetic wraps at 32 bits, so
    every step is masked and the result is read back as a signed int.
    """
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length - length % 4
    for (k,) in _WORDS.iter_unpack(data[:whole]):
        k = (k * _M) & _MASK
        k ^= k >> _R
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    tail = data[whole:]
    # Java's switch falls through: three trailing bytes also mix in the other two.
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h ^= tail[0]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h >= 1 << 31 else h


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: clears the sign bit (it is not ``abs``)."""
    return n & 0x7FFFFFFF


def role_partition(role: str, partitions: int) -> int:
    """The partition that holds every record of `role`, on the state and the terms topic."""
    if partitions < 1:
        raise ValueError(f"partitions must be at least 1, got {partitions}")
    return to_positive(murmur2(role.encode("utf-8"))) % partitions

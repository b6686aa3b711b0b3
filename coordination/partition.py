"""Kafka's key partitioning, applied to role names.

Every record of a role (registrations and leases, whose keys differ) must land
in one partition so the role's records carry one total order. Both producers
therefore pin the partition computed here; no partitioner runs.
"""

from __future__ import annotations

from aiokafka.partitioner import murmur2 as _unsigned_murmur2

__all__ = ["murmur2", "role_partition", "to_positive"]


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` of `data`, as Java's signed 32-bit int.

    aiokafka ships the same hash but returns it unsigned; the frozen contract
    (and the other ports' vectors) use Java's signed value.
    """
    h: int = _unsigned_murmur2(data)
    return h - (1 << 32) if h >= 1 << 31 else h


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: clears the sign bit (it is not ``abs``)."""
    return n & 0x7FFFFFFF


def role_partition(role: str, partitions: int) -> int:
    """The partition of `__coordination_state` that holds every record of `role`."""
    if partitions < 1:
        raise ValueError(f"partitions must be at least 1, got {partitions}")
    return to_positive(murmur2(role.encode("utf-8"))) % partitions

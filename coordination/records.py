"""The frozen record format of ``__coordination_state`` (docs/design.md#the-record-format).

Byte-compatible with the Go package this library was ported from, so other
implementations can share the topic; ``tests/unit/vectors/`` holds the golden
vectors any implementation can assert. The format is frozen: a field, its
order or a version number never changes here.

    key:           i16 version=0 | i16 kind | string role | string member
    registration:  i16 version=0 | string member | i64 registered_at
    lease:         i16 version=0 | string member | i64 producer_id
                   | i16 producer_epoch | i64 granted_at | i64 deadline

Integers are big-endian and signed; a string is an i16 byte length followed by
UTF-8. Decoders are strict (see
``docs/design.md#strict-decoding-width-checked-encoding``): anything that is
not exactly one well-formed record raises `coordination.errors.FormatError`,
and nothing else. The encoding rules themselves (widths, strings, strictness)
live in `coordination.wire`, shared with the term format.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from coordination.wire import Reader, Writer

__all__ = [
    "FORMAT_VERSION",
    "Key",
    "Kind",
    "Lease",
    "Registration",
    "decode_key",
    "decode_lease",
    "decode_registration",
    "encode_key",
    "encode_lease",
    "encode_registration",
    "lease_key",
    "registration_key",
]

FORMAT_VERSION = 0


class Kind(IntEnum):
    """What a key of the state topic describes."""

    REGISTRATION = 0
    LEASE = 1


@dataclass(frozen=True, slots=True)
class Key:
    """The key of a state record: one member's registration, or a role's lease."""

    role: str
    member: str
    kind: int


def registration_key(role: str, member: str) -> Key:
    """The key under which `member` registers as a candidate for `role`."""
    return Key(role, member, Kind.REGISTRATION)


def lease_key(role: str) -> Key:
    """The key of `role`'s lease; it names no member."""
    return Key(role, "", Kind.LEASE)


@dataclass(frozen=True, slots=True)
class Registration:
    """A candidate's registration; its offset in the partition is its rank."""

    member: str
    registered_at: int


@dataclass(frozen=True, slots=True)
class Lease:
    """A holder's claim on a role until `deadline`, under a fencing token."""

    member: str
    producer_id: int
    producer_epoch: int
    granted_at: int
    deadline: int


def encode_key(key: Key) -> bytes:
    """The bytes of `key`; raises `ValueError` for a value out of its width."""
    return (
        Writer()
        .i16(FORMAT_VERSION, "version")
        .i16(int(key.kind), "kind")
        .string(key.role, "role")
        .string(key.member, "member")
        .done()
    )


def decode_key(data: bytes) -> Key:
    """The key in `data`; raises `FormatError` with part ``"key"``."""
    reader = Reader(data, "key")
    reader.version(FORMAT_VERSION)
    raw_kind = reader.i16("kind")
    role = reader.string("role")
    member = reader.string("member")
    reader.end()
    try:
        kind = Kind(raw_kind)
    except ValueError:
        raise reader.fail(f"unknown kind {raw_kind}") from None
    if not role:
        raise reader.fail("empty role")
    if kind is Kind.REGISTRATION and not member:
        raise reader.fail("registration key with an empty member")
    if kind is Kind.LEASE and member:
        raise reader.fail("lease key with a non-empty member")
    return Key(role, member, kind)


def encode_registration(registration: Registration) -> bytes:
    """The value bytes of `registration`."""
    return (
        Writer()
        .i16(FORMAT_VERSION, "version")
        .string(registration.member, "member")
        .i64(registration.registered_at, "registered_at")
        .done()
    )


def decode_registration(data: bytes) -> Registration:
    """The registration in `data`; raises `FormatError` with part ``"registration value"``."""
    reader = Reader(data, "registration value")
    reader.version(FORMAT_VERSION)
    member = reader.string("member")
    registered_at = reader.i64("registered_at")
    reader.end()
    return Registration(member, registered_at)


def encode_lease(lease: Lease) -> bytes:
    """The value bytes of `lease`."""
    return (
        Writer()
        .i16(FORMAT_VERSION, "version")
        .string(lease.member, "member")
        .i64(lease.producer_id, "producer_id")
        .i16(lease.producer_epoch, "producer_epoch")
        .i64(lease.granted_at, "granted_at")
        .i64(lease.deadline, "deadline")
        .done()
    )


def decode_lease(data: bytes) -> Lease:
    """The lease in `data`; raises `FormatError` with part ``"lease value"``."""
    reader = Reader(data, "lease value")
    reader.version(FORMAT_VERSION)
    member = reader.string("member")
    producer_id = reader.i64("producer_id")
    producer_epoch = reader.i16("producer_epoch")
    granted_at = reader.i64("granted_at")
    deadline = reader.i64("deadline")
    reader.end()
    return Lease(member, producer_id, producer_epoch, granted_at, deadline)

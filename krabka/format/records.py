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
not exactly one well-formed record raises `krabka.errors.FormatError`,
and nothing else. The encoding rules themselves (widths, strings, strictness)
live in `krabka.format.wire`, shared with the term format.

Every reader decodes every record of its partitions, so each codec has a fast
path: one precompiled `struct.Struct` on each side of the record's string
(two for a key), which returns only for a record that is exactly well formed
(encodable). Whatever it does not take goes to the field-by-field
`Reader` / `Writer` walk, the definition, which raises what it always raised;
tests/unit/test_codec.py holds the two to the same answer on any bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from krabka.errors import FormatError
from krabka.format.wire import FAST_PATH_MISSES, Reader, Writer, slot_setters

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
    "role_of",
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


# The fast paths' layouts: "version, ..., i16 length" before a string, the
# fixed fields after the last one.
_KEY_HEAD = struct.Struct(">hhh")  # version, kind, role length
_LENGTH = struct.Struct(">h")  # member length
_VALUE_HEAD = struct.Struct(">hh")  # version, member length
_REGISTRATION_TAIL = struct.Struct(">q")  # registered_at
_LEASE_TAIL = struct.Struct(">qhqq")  # producer_id, producer_epoch, granted_at, deadline
_KINDS = {kind.value: kind for kind in Kind}
# Enum members looked up once: a class attribute lookup of an enum costs more
# than the rest of a key's checks.
_REGISTRATION = Kind.REGISTRATION
_LEASE = Kind.LEASE
_new = object.__new__
_set_role, _set_key_member, _set_kind = slot_setters(Key)
_set_registrant, _set_registered_at = slot_setters(Registration)
_set_holder, _set_producer_id, _set_producer_epoch, _set_granted_at, _set_deadline = (
    slot_setters(Lease))


def _new_key(role: str, member: str, kind: Kind) -> Key:
    key: Key = _new(Key)
    _set_role(key, role)
    _set_key_member(key, member)
    _set_kind(key, kind)
    return key


def encode_key(key: Key) -> bytes:
    """The bytes of `key`; raises `ValueError` for a value out of its width."""
    try:
        role = key.role.encode("utf-8")
        member = key.member.encode("utf-8")
        # struct refuses an integer out of its width, a length over 32767 included.
        return (_KEY_HEAD.pack(FORMAT_VERSION, key.kind, len(role)) + role
                + _LENGTH.pack(len(member)) + member)
    except FAST_PATH_MISSES:
        pass
    return (
        Writer()
        .i16(FORMAT_VERSION, "version")
        .i16(int(key.kind), "kind")
        .string(key.role, "role")
        .string(key.member, "member")
        .done()
    )


def role_of(key: bytes) -> str | None:
    """The role `key` names, or None for a key that does not decode (a fold
    cannot attribute it, so every role's fold lists it as an error)."""
    try:
        return decode_key(key).role
    except FormatError:
        return None


def decode_key(data: bytes) -> Key:
    """The key in `data`; raises `FormatError` with part ``"key"``."""
    try:
        version, raw_kind, length = _KEY_HEAD.unpack_from(data)
        end = 6 + length
        (member_length,) = _LENGTH.unpack_from(data, end)
        # Only the two shapes of a valid key; every other goes to the walk.
        if (version == FORMAT_VERSION and length > 0 and member_length >= 0
                and len(data) == end + 2 + member_length):
            role = str(data[6:end], "utf-8")
            if raw_kind == _LEASE and member_length == 0:
                return _new_key(role, "", _LEASE)
            if raw_kind == _REGISTRATION and member_length > 0:
                return _new_key(role, str(data[end + 2 :], "utf-8"), _REGISTRATION)
    except FAST_PATH_MISSES:
        pass
    reader = Reader(data, "key")
    reader.version(FORMAT_VERSION)
    raw_kind = reader.i16("kind")
    role = reader.string("role")
    member = reader.string("member")
    reader.end()
    kind = _KINDS.get(raw_kind)
    if kind is None:
        raise reader.fail(f"unknown kind {raw_kind}")
    if not role:
        raise reader.fail("empty role")
    if kind is Kind.REGISTRATION and not member:
        raise reader.fail("registration key with an empty member")
    if kind is Kind.LEASE and member:
        raise reader.fail("lease key with a non-empty member")
    return Key(role, member, kind)


def encode_registration(registration: Registration) -> bytes:
    """The value bytes of `registration`."""
    try:
        member = registration.member.encode("utf-8")
        return (_VALUE_HEAD.pack(FORMAT_VERSION, len(member)) + member
                + _REGISTRATION_TAIL.pack(registration.registered_at))
    except FAST_PATH_MISSES:
        pass
    return (
        Writer()
        .i16(FORMAT_VERSION, "version")
        .string(registration.member, "member")
        .i64(registration.registered_at, "registered_at")
        .done()
    )


def decode_registration(data: bytes) -> Registration:
    """The registration in `data`; raises `FormatError` with part ``"registration value"``."""
    try:
        version, length = _VALUE_HEAD.unpack_from(data)
        end = 4 + length
        if version == FORMAT_VERSION and length >= 0 and len(data) == end + 8:
            registration: Registration = _new(Registration)
            _set_registrant(registration, str(data[4:end], "utf-8"))
            _set_registered_at(registration, _REGISTRATION_TAIL.unpack_from(data, end)[0])
            return registration
    except FAST_PATH_MISSES:
        pass
    reader = Reader(data, "registration value")
    reader.version(FORMAT_VERSION)
    member = reader.string("member")
    registered_at = reader.i64("registered_at")
    reader.end()
    return Registration(member, registered_at)


def encode_lease(lease: Lease) -> bytes:
    """The value bytes of `lease`."""
    try:
        member = lease.member.encode("utf-8")
        return (_VALUE_HEAD.pack(FORMAT_VERSION, len(member)) + member
                + _LEASE_TAIL.pack(lease.producer_id, lease.producer_epoch,
                                   lease.granted_at, lease.deadline))
    except FAST_PATH_MISSES:
        pass
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
    try:
        version, length = _VALUE_HEAD.unpack_from(data)
        end = 4 + length
        if version == FORMAT_VERSION and length >= 0 and len(data) == end + 26:
            member = str(data[4:end], "utf-8")
            producer_id, producer_epoch, granted_at, deadline = _LEASE_TAIL.unpack_from(data, end)
            lease: Lease = _new(Lease)
            _set_holder(lease, member)
            _set_producer_id(lease, producer_id)
            _set_producer_epoch(lease, producer_epoch)
            _set_granted_at(lease, granted_at)
            _set_deadline(lease, deadline)
            return lease
    except FAST_PATH_MISSES:
        pass
    reader = Reader(data, "lease value")
    reader.version(FORMAT_VERSION)
    member = reader.string("member")
    producer_id = reader.i64("producer_id")
    producer_epoch = reader.i16("producer_epoch")
    granted_at = reader.i64("granted_at")
    deadline = reader.i64("deadline")
    reader.end()
    return Lease(member, producer_id, producer_epoch, granted_at, deadline)

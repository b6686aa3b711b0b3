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
not exactly one well-formed record raises `FormatError`, and nothing else.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from coordination.errors import FormatError

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
MAX_STRING_BYTES = 0x7FFF

_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")


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


class _Writer:
    """Appends fields in the frozen layout, checking only their widths."""

    def __init__(self) -> None:
        self._out = bytearray()

    def i16(self, value: int, name: str) -> _Writer:
        if not -(1 << 15) <= value < 1 << 15:
            raise ValueError(f"{name} {value} does not fit in a signed 16-bit integer")
        self._out += _I16.pack(value)
        return self

    def i64(self, value: int, name: str) -> _Writer:
        if not -(1 << 63) <= value < 1 << 63:
            raise ValueError(f"{name} {value} does not fit in a signed 64-bit integer")
        self._out += _I64.pack(value)
        return self

    def string(self, value: str, name: str) -> _Writer:
        try:
            data = value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"{name} is not encodable as UTF-8: {exc.reason}") from None
        if len(data) > MAX_STRING_BYTES:
            raise ValueError(f"{name} is {len(data)} UTF-8 bytes, over the limit of 32767")
        self.i16(len(data), name)
        self._out += data
        return self

    def done(self) -> bytes:
        return bytes(self._out)


class _Reader:
    """Reads fields in the frozen layout; every defect is a `FormatError`."""

    def __init__(self, data: bytes, part: str) -> None:
        self._data = memoryview(data)
        self._pos = 0
        self._part = part

    def fail(self, reason: str) -> FormatError:
        return FormatError(self._part, reason)

    def _take(self, size: int, name: str) -> memoryview:
        end = self._pos + size
        if end > len(self._data):
            raise self.fail(f"truncated in {name} at byte {self._pos}")
        chunk = self._data[self._pos : end]
        self._pos = end
        return chunk

    def i16(self, name: str) -> int:
        value: int = _I16.unpack(self._take(2, name))[0]
        return value

    def i64(self, name: str) -> int:
        value: int = _I64.unpack(self._take(8, name))[0]
        return value

    def string(self, name: str) -> str:
        length = self.i16(f"{name} length")
        if length < 0:
            raise self.fail(f"negative length {length} for {name}")
        raw = self._take(length, name)
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{name} is not valid UTF-8") from None

    def version(self) -> None:
        version = self.i16("version")
        if version != FORMAT_VERSION:
            raise self.fail(f"unsupported version {version}")

    def end(self) -> None:
        if self._pos != len(self._data):
            raise self.fail(f"{len(self._data) - self._pos} trailing bytes")


def encode_key(key: Key) -> bytes:
    """The bytes of `key`; raises `ValueError` for a value out of its width."""
    return (
        _Writer()
        .i16(FORMAT_VERSION, "version")
        .i16(int(key.kind), "kind")
        .string(key.role, "role")
        .string(key.member, "member")
        .done()
    )


def decode_key(data: bytes) -> Key:
    """The key in `data`; raises `FormatError` with part ``"key"``."""
    reader = _Reader(data, "key")
    reader.version()
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
        _Writer()
        .i16(FORMAT_VERSION, "version")
        .string(registration.member, "member")
        .i64(registration.registered_at, "registered_at")
        .done()
    )


def decode_registration(data: bytes) -> Registration:
    """The registration in `data`; raises `FormatError` with part ``"registration value"``."""
    reader = _Reader(data, "registration value")
    reader.version()
    member = reader.string("member")
    registered_at = reader.i64("registered_at")
    reader.end()
    return Registration(member, registered_at)


def encode_lease(lease: Lease) -> bytes:
    """The value bytes of `lease`."""
    return (
        _Writer()
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
    reader = _Reader(data, "lease value")
    reader.version()
    member = reader.string("member")
    producer_id = reader.i64("producer_id")
    producer_epoch = reader.i16("producer_epoch")
    granted_at = reader.i64("granted_at")
    deadline = reader.i64("deadline")
    reader.end()
    return Lease(member, producer_id, producer_epoch, granted_at, deadline)

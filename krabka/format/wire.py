"""The encoding rules every record format of this library shares.

One home for them: the frozen state-topic format (`krabka.format.records`)
and the term format (`krabka.format.terms`) are both written and read
through `Writer` and `Reader`. Integers are big-endian two's complement; a
string is an i16 byte length followed by strict UTF-8; a flag is an i16 that
is exactly 0 or 1. A `Writer` checks widths only and raises `ValueError`; a
`Reader` raises `FormatError` for every defect, naming the record part, and
nothing else (docs/design.md#strict-decoding-width-checked-encoding).
The state format's codecs also have a precompiled-struct fast path; it hands
whatever it does not take to these walks (`FAST_PATH_MISSES`) and builds
records with `slot_setters`. Internal: the formats' own modules are the
public API.
"""

from __future__ import annotations

import dataclasses
import struct
import types
from collections.abc import Callable
from typing import Any

from krabka.errors import FormatError

__all__ = ["FAST_PATH_MISSES", "MAX_STRING_BYTES", "Reader", "Writer", "slot_setters"]

MAX_STRING_BYTES = 0x7FFF

_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")

FAST_PATH_MISSES = (struct.error, TypeError, AttributeError, UnicodeError)
"""What a format's precompiled-struct fast path raises when it cannot take a
record or value (short or odd bytes, an integer or a length out of its width,
text that is not UTF-8, a field of the wrong type): it then hands it to the
`Reader` / `Writer` walk, which is the definition and raises the error a caller
sees, in the walk's field order."""


def slot_setters(cls: type) -> tuple[Callable[[Any, Any], None], ...]:
    """The slot setters of a slotted dataclass's fields, in field order.

    A frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``, and in a decoder that was about half the time
    spent per record. A fast path builds the instance with ``object.__new__``
    and these setters, in a third (`Lease`) to a half (`Key`) of the time;
    that is the same object only while ``__init__`` does nothing but assign
    its arguments, so a class with a ``__post_init__``, a field outside
    ``__init__`` or without a slot is refused here, at import.
    """
    fields = dataclasses.fields(cls)
    setters = tuple(vars(cls).get(field.name) for field in fields)
    if (hasattr(cls, "__post_init__") or not all(field.init for field in fields)
            or not all(isinstance(setter, types.MemberDescriptorType) for setter in setters)):
        raise TypeError(f"{cls.__qualname__} is not a plain slotted dataclass")
    return tuple(setter.__set__ for setter in setters)  # type: ignore[union-attr]


class Writer:
    """Appends fields in order, checking only their widths."""

    def __init__(self) -> None:
        self._out = bytearray()

    def i16(self, value: int, name: str) -> Writer:
        if not -(1 << 15) <= value < 1 << 15:
            raise ValueError(f"{name} {value} does not fit in a signed 16-bit integer")
        self._out += _I16.pack(value)
        return self

    def i64(self, value: int, name: str) -> Writer:
        if not -(1 << 63) <= value < 1 << 63:
            raise ValueError(f"{name} {value} does not fit in a signed 64-bit integer")
        self._out += _I64.pack(value)
        return self

    def string(self, value: str, name: str) -> Writer:
        try:
            data = value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"{name} is not encodable as UTF-8: {exc.reason}") from None
        if len(data) > MAX_STRING_BYTES:
            raise ValueError(f"{name} is {len(data)} UTF-8 bytes, over the limit of 32767")
        self.i16(len(data), name)
        self._out += data
        return self

    def flag(self, value: bool, name: str) -> Writer:
        return self.i16(1 if value else 0, name)

    def done(self) -> bytes:
        return bytes(self._out)


class Reader:
    """Reads fields in order; every defect is a `FormatError` naming `part`."""

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

    def flag(self, name: str) -> bool:
        raw = self.i16(name)
        if raw not in (0, 1):
            raise self.fail(f"{name} is {raw}, not 0 or 1")
        return raw == 1

    def version(self, expected: int) -> None:
        version = self.i16("version")
        if version != expected:
            raise self.fail(f"unsupported version {version}")

    def end(self) -> None:
        if self._pos != len(self._data):
            raise self.fail(f"{len(self._data) - self._pos} trailing bytes")

"""The record codec's fast paths answer exactly as the field-by-field walk of the layout.

The codecs take a precompiled-struct fast path for the common case; these
tests hold each decoder and encoder to the answer (value, or error type, part
and message) of reading and writing the documented layout one field at a
time with the shared Reader and Writer, on valid, damaged and arbitrary input
and on any field values. Round trips and the byte-exact vectors are
test_codec.py and test_vectors.py.
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

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
)
from krabka.format.wire import MAX_STRING_BYTES, Reader, Writer, slot_setters
from tests.unit.test_codec import I16, TEXT, keys, leases, registrations


def walk_key(data: bytes) -> Key:
    reader = Reader(data, "key")
    reader.version(0)
    raw_kind = reader.i16("kind")
    role = reader.string("role")
    member = reader.string("member")
    reader.end()
    if raw_kind not in (0, 1):
        raise reader.fail(f"unknown kind {raw_kind}")
    if not role:
        raise reader.fail("empty role")
    if raw_kind == 0 and not member:
        raise reader.fail("registration key with an empty member")
    if raw_kind == 1 and member:
        raise reader.fail("lease key with a non-empty member")
    return Key(role, member, Kind(raw_kind))


def walk_registration(data: bytes) -> Registration:
    reader = Reader(data, "registration value")
    reader.version(0)
    member = reader.string("member")
    registered_at = reader.i64("registered_at")
    reader.end()
    return Registration(member, registered_at)


def walk_lease(data: bytes) -> Lease:
    reader = Reader(data, "lease value")
    reader.version(0)
    fields = (reader.string("member"), reader.i64("producer_id"), reader.i16("producer_epoch"),
              reader.i64("granted_at"), reader.i64("deadline"))
    reader.end()
    return Lease(*fields)


def write_key(key: Key) -> bytes:
    return (Writer().i16(0, "version").i16(int(key.kind), "kind")
            .string(key.role, "role").string(key.member, "member").done())


def write_registration(registration: Registration) -> bytes:
    return (Writer().i16(0, "version").string(registration.member, "member")
            .i64(registration.registered_at, "registered_at").done())


def write_lease(lease: Lease) -> bytes:
    return (Writer().i16(0, "version").string(lease.member, "member")
            .i64(lease.producer_id, "producer_id").i16(lease.producer_epoch, "producer_epoch")
            .i64(lease.granted_at, "granted_at").i64(lease.deadline, "deadline").done())


def outcome(call: Callable[[Any], Any], argument: Any) -> tuple[Any, ...]:
    """What `call(argument)` gives: ("value", its type, it) or ("error", type, part, message)."""
    try:
        value = call(argument)
    except Exception as error:
        return ("error", type(error), getattr(error, "part", None), str(error))
    return ("value", type(value), value)


WALKS = [
    (decode_key, walk_key, st.one_of(keys, st.builds(Key, TEXT, TEXT, st.integers(-1, 2) | I16)),
     encode_key),
    (decode_registration, walk_registration, registrations, encode_registration),
    (decode_lease, walk_lease, leases, encode_lease),
]


@st.composite
def damaged(draw: st.DrawFn, records: st.SearchStrategy[Any], encode: Callable[[Any], bytes],
            ) -> bytes:
    """A record's bytes with some bytes overwritten, then cut or extended."""
    data = bytearray(encode(draw(records)))
    for position, byte in draw(st.lists(st.tuples(st.integers(0), st.integers(0, 255)),
                                        max_size=3)):
        data[position % len(data)] = byte
    cut = draw(st.integers(0, len(data)))
    return bytes(data[:cut]) if draw(st.booleans()) else bytes(data) + draw(st.binary(max_size=4))


@pytest.mark.parametrize(("decode", "walk", "records", "encode"), WALKS,
                         ids=["key", "registration", "lease"])
@given(data=st.data())
def test_a_decoder_answers_as_the_walk_of_its_layout_on_damaged_bytes(
        decode, walk, records, encode, data):
    raw = data.draw(st.one_of(records.map(encode), damaged(records, encode),
                              st.binary(max_size=40)))
    assert outcome(decode, raw) == outcome(walk, raw)


# Integers beyond their widths, text Python cannot encode as UTF-8, and wrong types.
ANY_INT = st.one_of(st.integers(), st.floats(allow_nan=False), st.none())
ANY_TEXT = st.one_of(st.text(max_size=20), st.none(), st.binary(max_size=4))
ANYTHING = [
    (encode_key, write_key, st.builds(Key, ANY_TEXT, ANY_TEXT, ANY_INT)),
    (encode_registration, write_registration, st.builds(Registration, ANY_TEXT, ANY_INT)),
    (encode_lease, write_lease, st.builds(Lease, ANY_TEXT, ANY_INT, ANY_INT, ANY_INT, ANY_INT)),
]


@pytest.mark.parametrize(("encode", "write", "values"), ANYTHING,
                         ids=["key", "registration", "lease"])
@given(data=st.data())
def test_an_encoder_answers_as_the_walk_of_its_layout_on_any_field_values(
        encode, write, values, data):
    value = data.draw(values)
    assert outcome(encode, value) == outcome(write, value)


def test_an_encoder_refuses_a_string_over_the_limit_as_the_walk_does():
    key = lease_key("x" * (MAX_STRING_BYTES + 1))
    assert outcome(encode_key, key) == outcome(write_key, key)
    assert outcome(encode_key, key)[1] is ValueError


def test_decoded_records_equal_constructed_ones_field_for_field():
    lease = decode_lease(encode_lease(Lease("m", 1, 2, 3, 4)))
    assert (type(lease), lease, hash(lease)) == (Lease, Lease("m", 1, 2, 3, 4),
                                                 hash(Lease("m", 1, 2, 3, 4)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        lease.member = "other"  # type: ignore[misc]


def test_slot_setters_refuse_a_class_whose_init_does_more_than_assign():
    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        value: int

        def __post_init__(self) -> None:
            pass

    @dataclasses.dataclass(frozen=True)
    class Unslotted:
        value: int

    for cls in (Checked, Unslotted):
        with pytest.raises(TypeError, match="not a plain slotted dataclass"):
            slot_setters(cls)

"""The record codec: round trips, width checks, and decoders that only raise FormatError.

Byte-exact expectations live in ``tests/unit/vectors/`` (see test_vectors.py);
these tests cover the whole input space with hypothesis.
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordination import (
    FormatError,
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
from coordination.wire import MAX_STRING_BYTES, Reader, Writer, slot_setters

I16 = st.integers(-(2**15), 2**15 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
# Any text that is valid UTF-8 (no lone surrogates) and fits the i16 length.
TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=200)
NAME = TEXT.filter(lambda s: s != "")

registrations = st.builds(Registration, TEXT, I64)
leases = st.builds(Lease, TEXT, I64, I16, I64, I64)
keys = st.one_of(
    st.builds(registration_key, NAME, NAME),
    st.builds(lease_key, NAME),
)


@given(keys)
def test_every_valid_key_round_trips(key):
    assert decode_key(encode_key(key)) == key


@given(registrations)
def test_every_registration_round_trips(registration):
    assert decode_registration(encode_registration(registration)) == registration


@given(leases)
def test_every_lease_round_trips(lease):
    assert decode_lease(encode_lease(lease)) == lease


def test_decoded_keys_carry_the_kind_enum():
    assert decode_key(encode_key(lease_key("r"))).kind is Kind.LEASE


def test_a_string_of_exactly_32767_bytes_encodes():
    role = "x" * 32767
    assert decode_key(encode_key(lease_key(role))).role == role


def test_a_string_over_32767_utf8_bytes_is_refused_with_value_error():
    with pytest.raises(ValueError, match="32767"):
        encode_key(lease_key("é" * 16384))  # 32768 bytes


@pytest.mark.parametrize(
    "lease",
    [
        Lease("m", 2**63, 0, 0, 0),
        Lease("m", 0, 2**15, 0, 0),
        Lease("m", 0, -(2**15) - 1, 0, 0),
        Lease("m", 0, 0, -(2**63) - 1, 0),
        Lease("m", 0, 0, 0, 2**63),
    ],
    ids=["producer_id", "epoch-high", "epoch-low", "granted_at", "deadline"],
)
def test_an_integer_out_of_its_width_is_refused_with_value_error(lease):
    with pytest.raises(ValueError, match="does not fit"):
        encode_lease(lease)


def test_a_kind_out_of_width_is_refused_with_value_error():
    with pytest.raises(ValueError, match="kind"):
        encode_key(Key("r", "m", 2**15))


def test_a_name_that_is_not_encodable_as_utf8_is_refused_with_value_error():
    with pytest.raises(ValueError, match="UTF-8"):
        encode_key(registration_key("r", "\udcff"))


def test_the_encoder_checks_widths_only_so_negative_epochs_and_times_round_trip():
    lease = Lease("m", -1, -1, -5, -6)
    assert decode_lease(encode_lease(lease)) == lease


def test_format_error_is_a_value_error_that_names_its_part():
    with pytest.raises(ValueError, match="malformed lease value") as caught:
        decode_lease(b"")
    assert isinstance(caught.value, FormatError)
    assert caught.value.part == "lease value"


DECODERS = {
    "key": decode_key,
    "registration value": decode_registration,
    "lease value": decode_lease,
}


def failure_part(part: str, data: bytes) -> str | None:
    """None if `data` decodes as `part`; the FormatError's part if not.

    Any other exception escapes and fails the test.
    """
    try:
        DECODERS[part](data)
    except FormatError as error:
        return error.part
    return None


@pytest.mark.parametrize("part", DECODERS)
@given(data=st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_raise_format_error_for_that_part(part, data):
    assert failure_part(part, data) in (None, part)


@given(key=keys, extra=st.binary(min_size=1, max_size=8))
def test_a_valid_key_with_trailing_bytes_is_a_format_error(key, extra):
    with pytest.raises(FormatError, match="trailing"):
        decode_key(encode_key(key) + extra)


@given(lease=leases, cut=st.integers(min_value=1))
def test_every_truncation_of_a_lease_is_a_format_error(lease, cut):
    data = encode_lease(lease)
    with pytest.raises(FormatError, match="truncated") as caught:
        decode_lease(data[: len(data) - 1 - cut % len(data)])
    assert caught.value.part == "lease value"


@given(registration=registrations, cut=st.integers(min_value=1))
def test_every_truncation_of_a_registration_is_a_format_error(registration, cut):
    data = encode_registration(registration)
    with pytest.raises(FormatError, match="truncated") as caught:
        decode_registration(data[: len(data) - 1 - cut % len(data)])
    assert caught.value.part == "registration value"


@given(key=keys, flips=st.lists(st.tuples(st.integers(0), st.integers(0, 255)), max_size=4))
def test_corrupted_keys_decode_or_raise_format_error(key, flips):
    data = bytearray(encode_key(key))
    for position, byte in flips:
        data[position % len(data)] = byte
    assert failure_part("key", bytes(data)) in (None, "key")


# -- the decoders and encoders answer as the field-by-field walk of the layout --
# The codecs take a precompiled-struct fast path for the common case; these
# hold them to the answer (value, or error type, part and message) of reading
# and writing the documented layout one field at a time with the shared
# Reader and Writer, on valid, damaged and arbitrary input.


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

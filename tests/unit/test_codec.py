"""The record codec: round trips, width checks, and decoders that only raise FormatError.

Byte-exact expectations live in ``tests/unit/vectors/`` (see test_vectors.py);
these tests cover the whole input space with hypothesis.
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from krabka import FormatError
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
    registration_key,
)

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

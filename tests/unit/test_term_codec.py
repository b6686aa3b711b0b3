"""The term format's codec over the whole input space: round trips, width checks,
and decoders that raise only FormatError. Byte-exact cases: test_term_vectors.py."""

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from krabka import FormatError
from krabka.format.records import decode_key, encode_key, lease_key, registration_key
from krabka.format.terms import (
    Barrier,
    Claim,
    Heartbeat,
    TermKey,
    TermKind,
    TermStamp,
    barrier_key,
    claim_key,
    decode_barrier,
    decode_claim,
    decode_heartbeat,
    decode_term_header,
    decode_term_key,
    encode_barrier,
    encode_claim,
    encode_heartbeat,
    encode_term_header,
    encode_term_key,
    heartbeat_key,
)

I64 = st.integers(-(2**63), 2**63 - 1)
TERM = st.integers(1, 2**63 - 1)
TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=100)
NAME = TEXT.filter(lambda s: s != "")

term_keys = st.one_of(
    st.builds(claim_key, NAME, NAME, TERM),
    st.builds(heartbeat_key, NAME),
    st.builds(barrier_key, NAME, NAME, TERM),
)
DECODERS = [decode_term_key, decode_claim, decode_heartbeat, decode_barrier, decode_term_header]


@given(term_keys)
def test_every_valid_term_key_round_trips(key):
    assert decode_term_key(encode_term_key(key)) == key


@given(st.builds(Claim, TEXT, I64, I64))
def test_every_claim_round_trips(claim):
    assert decode_claim(encode_claim(claim)) == claim


@given(st.builds(Heartbeat, TEXT, I64, I64, st.booleans()))
def test_every_heartbeat_round_trips(heartbeat):
    assert decode_heartbeat(encode_heartbeat(heartbeat)) == heartbeat


@given(st.builds(Barrier, TEXT, I64, I64))
def test_every_barrier_round_trips(barrier):
    assert decode_barrier(encode_barrier(barrier)) == barrier


@given(st.builds(TermStamp, NAME, TERM, st.booleans()))
def test_every_valid_term_header_round_trips(stamp):
    assert decode_term_header(encode_term_header(stamp)) == stamp


@pytest.mark.parametrize("decode", DECODERS, ids=lambda d: d.__name__)
@given(data=st.binary(max_size=64))
def test_term_decoders_raise_nothing_but_format_error(decode, data):
    with contextlib.suppress(FormatError):
        decode(data)


def test_decoded_term_keys_carry_the_kind_enum():
    assert decode_term_key(encode_term_key(heartbeat_key("r"))).kind is TermKind.HEARTBEAT


@pytest.mark.parametrize(
    "key", [registration_key("r", "m"), lease_key("r")], ids=["registration", "lease"]
)
def test_a_state_key_never_decodes_as_a_term_key(key):
    with pytest.raises(FormatError) as raised:
        decode_term_key(encode_key(key))
    assert raised.value.part == "term key"


@given(term_keys)
def test_a_term_key_never_decodes_as_a_state_key(key):
    with pytest.raises(FormatError) as raised:
        decode_key(encode_term_key(key))
    assert raised.value.part == "key"


@pytest.mark.parametrize("term", [2**63, -(2**63) - 1])
def test_a_term_outside_64_bits_is_refused_with_value_error(term):
    with pytest.raises(ValueError, match="64-bit"):
        encode_term_key(claim_key("r", "m", term))


def test_a_role_over_32767_utf8_bytes_is_refused_with_value_error():
    with pytest.raises(ValueError, match="32767"):
        encode_term_header(TermStamp("x" * 32768, 1))


@given(NAME, NAME, NAME, TERM, TERM)
def test_a_claim_key_is_unique_to_role_term_and_claimant(role, one, other, term, later):
    # So compaction, which keeps the latest record per key, never removes a claim.
    keys = {
        encode_term_key(claim_key(role, one, term)),
        encode_term_key(claim_key(role, other, term)),
        encode_term_key(claim_key(role, one, later)),
    }
    assert len(keys) == len({(one, term), (other, term), (one, later)})


@given(NAME, NAME, TERM)
def test_a_barrier_key_is_unique_to_role_term_and_leader_and_never_a_claim_key(role, leader, term):
    assert encode_term_key(barrier_key(role, leader, term)) != encode_term_key(
        claim_key(role, leader, term))
    assert encode_term_key(barrier_key(role, leader, term)) != encode_term_key(
        barrier_key(role, leader, term + 1 if term < 2**63 - 1 else term - 1))


def test_a_heartbeat_key_names_the_role_only_so_compaction_keeps_its_latest():
    # The leader and its term are in the value; the key is the same for every heartbeat.
    assert decode_term_key(encode_term_key(heartbeat_key("r"))) == TermKey(
        "r", "", 0, TermKind.HEARTBEAT)
    assert encode_term_key(heartbeat_key("r")) != encode_term_key(heartbeat_key("s"))

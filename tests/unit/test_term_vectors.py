"""The golden vectors of the term format (docs/term-mode.md#the-record-layouts).

`tests/unit/vectors/terms.json` was written by hand from the byte layout, not by
running this library's encoder, so other implementations can assert the same
file; `tests/unit/vectors/README.md` describes it. Each test id is a vector's name.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from krabka import FormatError
from krabka.format.terms import (
    Barrier,
    Claim,
    Heartbeat,
    TermKey,
    TermStamp,
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
)

VECTORS = json.loads((Path(__file__).parent / "vectors" / "terms.json").read_text("utf-8"))
VALID: list[dict[str, Any]] = VECTORS["valid"]
MALFORMED: list[dict[str, Any]] = VECTORS["malformed"]

PARTS = {
    "term_key": "term key",
    "claim": "claim value",
    "heartbeat": "heartbeat value",
    "barrier": "barrier value",
    "term_header": "term header",
}
TYPES: dict[str, type] = {
    "term_key": TermKey,
    "claim": Claim,
    "heartbeat": Heartbeat,
    "barrier": Barrier,
    "term_header": TermStamp,
}
ENCODE: dict[str, Callable[[Any], bytes]] = {
    "term_key": encode_term_key,
    "claim": encode_claim,
    "heartbeat": encode_heartbeat,
    "barrier": encode_barrier,
    "term_header": encode_term_header,
}
DECODE: dict[str, Callable[[bytes], Any]] = {
    "term_key": decode_term_key,
    "claim": decode_claim,
    "heartbeat": decode_heartbeat,
    "barrier": decode_barrier,
    "term_header": decode_term_header,
}
DEFECTS = {
    "truncated", "trailing-bytes", "negative-length", "invalid-utf8", "version",
    "unknown-kind", "empty-role", "empty-member", "term-below-1", "heartbeat-key-member",
    "heartbeat-key-term", "flag",
}


def each(vectors: list[dict[str, Any]]) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("vector", vectors, ids=[v["name"] for v in vectors])


def build(vector: dict[str, Any]) -> Any:
    return TYPES[vector["type"]](**vector["fields"])


def as_fields(decoded: Any) -> dict[str, Any]:
    return {name: getattr(decoded, name) for name in type(decoded).__slots__}


# -- the file itself --------------------------------------------------------


def test_vector_names_are_unique():
    names = [v["name"] for v in VALID + MALFORMED]
    assert len(names) == len(set(names))


def test_the_file_describes_format_version_0():
    assert VECTORS["format_version"] == 0


@each(VALID)
def test_commented_bytes_concatenate_to_the_hex(vector):
    assert "".join(chunk for chunk, _ in vector["bytes"]) == vector["hex"]
    for chunk, comment in vector["bytes"]:
        assert chunk == chunk.lower()
        assert bytes.fromhex(chunk).hex() == chunk
        assert comment.strip()


@each(VALID)
def test_fields_as_strings_spell_every_integer_in_decimal(vector):
    fields, spelled = vector["fields"], vector["fields_as_strings"]
    assert spelled.keys() == fields.keys()
    for name, value in fields.items():
        plain_int = isinstance(value, int) and not isinstance(value, bool)
        assert spelled[name] == (str(value) if plain_int else value), name


@each(MALFORMED)
def test_each_malformed_vector_names_its_part_and_a_known_defect(vector):
    assert vector["part"] == PARTS[vector["type"]]
    assert vector["defect"] in DEFECTS


# -- valid vectors ----------------------------------------------------------


@each(VALID)
def test_encoding_the_fields_gives_exactly_the_hex(vector):
    assert ENCODE[vector["type"]](build(vector)).hex() == vector["hex"]


@each(VALID)
def test_decoding_the_hex_gives_exactly_the_fields(vector):
    decoded = DECODE[vector["type"]](bytes.fromhex(vector["hex"]))
    assert decoded == build(vector)
    assert as_fields(decoded) == vector["fields"]


# -- malformed vectors ------------------------------------------------------


@each(MALFORMED)
def test_decoding_malformed_bytes_raises_format_error_naming_the_part(vector):
    with pytest.raises(FormatError) as raised:
        DECODE[vector["type"]](bytes.fromhex(vector["hex"]))
    assert raised.value.part == vector["part"]

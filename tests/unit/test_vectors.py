"""The golden vectors of the frozen record format (docs/design.md#the-record-format).

`tests/unit/vectors/records.json` was written by hand from the byte layout, not by
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
from krabka.format.records import (
    Key,
    Lease,
    Registration,
    decode_key,
    decode_lease,
    decode_registration,
    encode_key,
    encode_lease,
    encode_registration,
)
from krabka.rules.fold import build_role_state
from krabka.rules.state import Record

VECTORS_FILE = Path(__file__).parent / "vectors" / "records.json"
VECTORS = json.loads(VECTORS_FILE.read_text(encoding="utf-8"))
VALID: list[dict[str, Any]] = VECTORS["valid"]
MALFORMED: list[dict[str, Any]] = VECTORS["malformed"]
TOMBSTONES: list[dict[str, Any]] = VECTORS["tombstones"]
VALID_BY_NAME = {vector["name"]: vector for vector in VALID}

PARTS = {"key": "key", "registration": "registration value", "lease": "lease value"}

BUILD: dict[str, Callable[[dict[str, Any]], Any]] = {
    # kind stays the plain int of the JSON: a Key takes int 0 or 1 (docs/design.md#the-public-api).
    "key": lambda fields: Key(fields["role"], fields["member"], fields["kind"]),
    "registration": lambda fields: Registration(fields["member"], fields["registered_at"]),
    "lease": lambda fields: Lease(
        fields["member"],
        fields["producer_id"],
        fields["producer_epoch"],
        fields["granted_at"],
        fields["deadline"],
    ),
}
ENCODE: dict[str, Callable[[Any], bytes]] = {
    "key": encode_key,
    "registration": encode_registration,
    "lease": encode_lease,
}
DECODE: dict[str, Callable[[bytes], Any]] = {
    "key": decode_key,
    "registration": decode_registration,
    "lease": decode_lease,
}


def each(vectors: list[dict[str, Any]], argname: str = "vector") -> pytest.MarkDecorator:
    """Parametrize a test over `vectors`, one test id per vector name."""
    return pytest.mark.parametrize(argname, vectors, ids=[vector["name"] for vector in vectors])


def as_fields(decoded: Any) -> dict[str, Any]:
    """The public fields of a decoded key or value, as plain Python values."""
    names = {
        Key: ("role", "member", "kind"),
        Registration: ("member", "registered_at"),
        Lease: ("member", "producer_id", "producer_epoch", "granted_at", "deadline"),
    }[type(decoded)]
    return {name: getattr(decoded, name) for name in names}


# -- the file itself --------------------------------------------------------


def test_vector_names_are_unique() -> None:
    names = [vector["name"] for vector in VALID + MALFORMED + TOMBSTONES]
    assert len(names) == len(set(names))


@each(VALID)
def test_commented_bytes_concatenate_to_the_hex(vector: dict[str, Any]) -> None:
    assert "".join(chunk for chunk, _comment in vector["bytes"]) == vector["hex"]


@each(VALID)
def test_every_commented_chunk_is_whole_lowercase_bytes_with_a_comment(
    vector: dict[str, Any],
) -> None:
    for chunk, comment in vector["bytes"]:
        assert chunk
        assert chunk == chunk.lower()
        assert bytes.fromhex(chunk).hex() == chunk
        assert comment.strip()


@each(VALID)
def test_fields_as_strings_spell_the_same_values_in_decimal(vector: dict[str, Any]) -> None:
    fields, spelled = vector["fields"], vector["fields_as_strings"]
    assert spelled.keys() == fields.keys()
    for name, value in fields.items():
        expected = str(value) if isinstance(value, int) else value
        assert spelled[name] == expected, name


@each(MALFORMED)
def test_malformed_part_names_the_record_part_of_its_type(vector: dict[str, Any]) -> None:
    assert vector["part"] == PARTS[vector["type"]]


# -- valid vectors ----------------------------------------------------------


@each(VALID)
def test_encoding_the_fields_gives_exactly_the_hex(vector: dict[str, Any]) -> None:
    encoded = ENCODE[vector["type"]](BUILD[vector["type"]](vector["fields"]))
    assert encoded.hex() == vector["hex"]


@each(VALID)
def test_decoding_the_hex_gives_exactly_the_fields(vector: dict[str, Any]) -> None:
    decoded = DECODE[vector["type"]](bytes.fromhex(vector["hex"]))
    assert decoded == BUILD[vector["type"]](vector["fields"])
    assert as_fields(decoded) == vector["fields"]


# -- malformed vectors ------------------------------------------------------


def test_format_error_is_a_value_error() -> None:
    assert issubclass(FormatError, ValueError)


@each(MALFORMED)
def test_decoding_malformed_bytes_raises_format_error_naming_the_part(
    vector: dict[str, Any],
) -> None:
    with pytest.raises(FormatError) as raised:
        DECODE[vector["type"]](bytes.fromhex(vector["hex"]))
    assert raised.value.part == vector["part"]


# -- tombstones -------------------------------------------------------------
# A tombstone has no value bytes to decode: the record layer reads a null (or
# empty) value as "cancel the record under this key" before any decoder runs.

TOMBSTONE_VALUES = pytest.mark.parametrize("tombstone_value", [None, b""], ids=["null", "empty"])


def records_with(tombstone: dict[str, Any], *values: bytes | None) -> list[Any]:
    """Records at offsets 0, 1, ... under the tombstone's key, carrying `values`."""
    key = bytes.fromhex(VALID_BY_NAME[tombstone["key"]]["hex"])
    return [
        Record(offset, key, value, 1_700_000_000_000 + offset)
        for offset, value in enumerate(values)
    ]


def role_state(tombstone: dict[str, Any], *values: bytes | None) -> Any:
    role = VALID_BY_NAME[tombstone["key"]]["fields"]["role"]
    return build_role_state(role, records_with(tombstone, *values))


def is_in_effect(tombstone: dict[str, Any], state: Any) -> bool:
    """Whether the record the tombstone cancels shows in `state`."""
    cancelled = VALID_BY_NAME[tombstone["cancels"]]
    if cancelled["type"] == "registration":
        return bool(state.rank_of(cancelled["fields"]["member"])[1])
    return bool(state.lease == BUILD["lease"](cancelled["fields"]))


@each(TOMBSTONES, "tombstone")
def test_tombstone_vectors_are_a_valid_key_and_a_null_value(tombstone: dict[str, Any]) -> None:
    key = VALID_BY_NAME[tombstone["key"]]
    cancels = VALID_BY_NAME[tombstone["cancels"]]
    assert key["type"] == "key"
    assert cancels["type"] == ("registration", "lease")[key["fields"]["kind"]]
    assert tombstone["value"] is None


@each(TOMBSTONES, "tombstone")
def test_without_its_tombstone_the_cancelled_record_is_in_effect(
    tombstone: dict[str, Any],
) -> None:
    cancelled = bytes.fromhex(VALID_BY_NAME[tombstone["cancels"]]["hex"])
    assert is_in_effect(tombstone, role_state(tombstone, cancelled))


@TOMBSTONE_VALUES
@each(TOMBSTONES, "tombstone")
def test_tombstone_cancels_the_record_under_its_key(
    tombstone: dict[str, Any], tombstone_value: bytes | None
) -> None:
    cancelled = bytes.fromhex(VALID_BY_NAME[tombstone["cancels"]]["hex"])
    assert not is_in_effect(tombstone, role_state(tombstone, cancelled, tombstone_value))


@TOMBSTONE_VALUES
@each(TOMBSTONES, "tombstone")
def test_tombstone_is_not_a_malformed_record(
    tombstone: dict[str, Any], tombstone_value: bytes | None
) -> None:
    cancelled = bytes.fromhex(VALID_BY_NAME[tombstone["cancels"]]["hex"])
    assert role_state(tombstone, cancelled, tombstone_value).errors == []

"""The events topic's JSON Schema (docs/events.schema.json), for every test that
checks what the fold publishes: `published` decodes an event's bytes and fails
the test with each violation of the schema."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "docs" / "events.schema.json"
SCHEMA: dict[str, Any] = json.loads(SCHEMA_PATH.read_text())
# The file names no dialect ($schema would be a URL): it is written in 2020-12.
VALIDATOR = Draft202012Validator(SCHEMA)


def violations(event: Mapping[str, Any]) -> list[str]:
    """Each way `event` breaks the schema, one line each (none: it matches)."""
    return sorted(f"{'/'.join(map(str, error.absolute_path)) or '(event)'}: {error.message}"
                  for error in VALIDATOR.iter_errors(event))


def published(value: bytes | Mapping[str, Any]) -> dict[str, Any]:
    """An event as published (its bytes, or their JSON), checked against the schema."""
    event = dict(json.loads(value)) if isinstance(value, bytes) else dict(value)
    problems = violations(event)
    assert not problems, (event, problems)
    return event


class Published:
    """An events topic for a fold under test: each event it is sent is checked
    against the schema, and its bytes kept in `values`, in order."""

    def __init__(self) -> None:
        self.values: list[bytes] = []

    async def send(self, *, key: bytes, value: bytes, partition: int) -> None:
        published(value)
        self.values.append(value)

"""State-topic records as the fold agent receives them from Faust, without Faust."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from krabka.rules.state import Record

__all__ = ["FakeEvent", "state_event"]


@dataclass(eq=False)
class FakeEvent:
    """What the fold reads of a Faust event: its message. Like Faust's events it
    can be weakly referenced, which Faust's current-event variable needs."""

    message: Any


def state_event(record: Record, partition: int, generation_id: int = 0) -> FakeEvent:
    """`record` as an event of state partition `partition` (Faust gives timestamps in s),
    fetched in the consumer generation `generation_id` (an app's first is 0)."""
    return FakeEvent(SimpleNamespace(partition=partition, offset=record.offset, key=record.key,
                                     value=record.value, timestamp=record.timestamp / 1000,
                                     generation_id=generation_id))

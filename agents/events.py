"""Leadership-change events: what the fold publishes to
``coordination-leadership-changes`` (schema in docs/events.md).

The event, its JSON form and its readable line are the library's
(`krabka.observe.events`), which the operator CLI's ``watch`` prints too; the
topic they are published to is the worker's.
"""

from __future__ import annotations

from krabka.observe.events import KINDS, EventKind, LeadershipEvent, describe

__all__ = ["EVENTS_TOPIC", "KINDS", "EventKind", "LeadershipEvent", "describe"]

EVENTS_TOPIC = "coordination-leadership-changes"

"""Doubles for tests, like ``trio.testing``: `MemoryBroker`/`MemoryTransport`
model the Kafka rules the protocol relies on; `ManualClock` drives time. The
library itself never imports this package."""

from krabka.testing.clock import ManualClock
from krabka.testing.memory import MemoryBroker, MemoryTransport

__all__ = ["ManualClock", "MemoryBroker", "MemoryTransport"]

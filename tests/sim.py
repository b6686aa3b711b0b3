"""A MemoryBroker, a ManualClock and members on them: the harness for protocol tests."""

from __future__ import annotations

import asyncio

from coordination import (
    Clock,
    Leadership,
    ManualClock,
    MemoryBroker,
    MemoryTransport,
    acquire_leadership,
)
from tests.loop import run_ready_callbacks

STATE = "__coordination_state"
LEASE = 3.0
RENEW = 1.0
STAGGER = 0.5


class Cluster:
    """One simulated Kafka cluster whose time moves only when the test says so."""

    def __init__(self, partitions: int = 4) -> None:
        self.partitions = partitions
        self.clock = ManualClock()
        self.broker = MemoryBroker(clock=self.clock)
        self.broker.create_topic(STATE, partitions)
        self.broker.create_topic("out", 1, compacted=False)

    def transport(self) -> MemoryTransport:
        """A new client process on this cluster."""
        return MemoryTransport(self.broker)

    def candidate(
        self, member: str, role: str = "billing", transport: MemoryTransport | None = None,
        clock: Clock | None = None, **options: float,
    ) -> asyncio.Task[Leadership]:
        """Start `member`'s acquire_leadership as a task, in its own process."""
        settings = {"lease_duration": LEASE, "renew_interval": RENEW,
                    "challenge_stagger": STAGGER, **options}
        return asyncio.create_task(
            acquire_leadership(
                transport or self.transport(), role, member, partitions=self.partitions,
                clock=clock or self.clock, **settings,
            )
        )

    async def settle(self) -> None:
        """Let every task run until it waits on the clock or the log."""
        await run_ready_callbacks(50)

    async def advance(self, seconds: float, step_ms: int = 10) -> None:
        """Move time forward in small steps, letting every task act at each."""
        remaining = round(seconds * 1000)
        await self.settle()
        while remaining > 0:
            move = min(step_ms, remaining)
            self.clock.advance_ms(move)
            remaining -= move
            await self.settle()

    async def until(self, condition, within: float, step_ms: int = 10) -> None:
        """Advance time until `condition()` holds; fail after `within` seconds."""
        deadline = self.clock.now_ms() + round(within * 1000)
        await self.settle()
        while not condition():
            if self.clock.now_ms() >= deadline:
                raise AssertionError(f"condition not met within {within} s of clock time")
            self.clock.advance_ms(step_ms)
            await self.settle()

    def out_values(self) -> list[bytes | None]:
        """What a read_committed consumer of the output topic sees."""
        return [r.value for r in self.broker.partition("out", 0).read_committed(0).records]


def crash(leadership: Leadership) -> None:
    """The leader's process dies: it stops renewing and writes nothing more."""
    for task in leadership._tasks:
        task.cancel()


class SkewedClock:
    """A member's clock that reads `offset_ms` away from the cluster's."""

    def __init__(self, base: ManualClock, offset_ms: int) -> None:
        self._base = base
        self._offset = offset_ms

    def now_ms(self) -> int:
        return self._base.now_ms() + self._offset

    async def sleep_until(self, at_ms: int) -> None:
        await self._base.sleep_until(at_ms - self._offset)

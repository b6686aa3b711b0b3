"""A MemoryBroker, a ManualClock and members on them: the harness for protocol tests.

`Cluster` drives one in-process cluster by hand. For the deterministic
simulation (tests/faults/simulation.py) there is more: `quiesce` runs every ready
task to a stop, `MemberClock` gives each member process its own skewed,
pausable clock, and `FaultyTransport` puts pauses, message delays and crashes
between a member and the broker.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Collection
from typing import Any, TypeVar

from krabka import (
    STATE_TOPIC,
    TERMS_TOPIC,
    Clock,
    FencedError,
    FencingToken,
    GuardedTransaction,
    Leadership,
    LeadershipStatus,
    PartitionRead,
    PartitionTail,
    TopicCheck,
    TopicFacts,
    TransportError,
    acquire_leadership,
)
from krabka.testing import ManualClock, MemoryBroker, MemoryTransport
from tests.support.loop import run_ready_callbacks

STATE = STATE_TOPIC
LEASE = 3.0
RENEW = 1.0
STAGGER = 0.5

T = TypeVar("T")


class Cluster:
    """One simulated Kafka cluster whose time moves only when the test says so."""

    def __init__(self, partitions: int = 4) -> None:
        self.partitions = partitions
        self.clock = ManualClock()
        self.broker = MemoryBroker(clock=self.clock)
        self.broker.create_topic(STATE, partitions)
        self.broker.create_topic(TERMS_TOPIC, partitions)
        self.broker.create_topic("out", 1, compacted=False)

    def transport(self) -> MemoryTransport:
        """A new client process on this cluster."""
        return MemoryTransport(self.broker)

    def state_records(self) -> list[Any]:
        """Every committed record of the state topic, partition by partition."""
        return [record for partition in range(self.partitions)
                for record in self.broker.partition(STATE, partition).read_committed(0).records]

    def candidate(
        self, member: str, role: str = "billing", transport: MemoryTransport | None = None,
        clock: Clock | None = None, **options: Any,
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

    async def stop_runners(self, *runners: Any, within: float = 30) -> None:
        """Stop `runners` (LeaderRunner), moving time so their bounded steps end.

        Call it from a ``finally``: a runner left running at the end of a test
        would wait on this clock forever while the event loop shuts down.
        """
        stops = [asyncio.ensure_future(runner.stop()) for runner in runners]
        await self.until(lambda: all(stop.done() for stop in stops), within=within)

    def out_values(self) -> list[bytes | None]:
        """What a read_committed consumer of the output topic sees."""
        return [r.value for r in self.broker.partition("out", 0).read_committed(0).records]


async def lead(cluster: Cluster, member: str, **options: Any) -> Leadership:
    """`member` stands for the role and takes it (within one second of clock time)."""
    task = cluster.candidate(member, **options)
    await cluster.until(task.done, within=1)
    return task.result()


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

    def monotonic_ms(self) -> int:
        return self._base.monotonic_ms()

    async def sleep_until_monotonic(self, at_ms: int) -> None:
        await self._base.sleep_until_monotonic(at_ms)


async def quiesce(limit: int = 100_000) -> None:
    """Run every ready task until all of them wait on the clock or the log.

    A scheduler yield repeated until asyncio's ready queue is empty, so after
    it nothing can happen until the clock moves or a test acts. A task that
    never stops being ready (a spin) is an error, not a hang.
    """
    loop = asyncio.get_running_loop()
    ready = getattr(loop, "_ready", None)  # CPython's queue of runnable callbacks
    if ready is None:
        await run_ready_callbacks(200)
        return
    for _ in range(limit):
        await asyncio.sleep(0)
        if not ready:
            return
    raise RuntimeError(f"the event loop was still busy after {limit} rounds: a task spins")


class MemberClock:
    """One member process's wall clock: skewed from the cluster's, and pausable.

    `offset_ms` is the skew (record timestamps and lease deadlines carry it).
    While `paused`, no sleeper of this member wakes and every call through a
    `FaultyTransport` on this clock waits: the process is stopped. `resume`
    restarts it; with ``frozen=True`` neither of its clocks ran during the
    pause (a frozen VM), so both come back behind by the pause length, the
    wall clock until `set_offset` steps it (NTP), the monotonic clock for
    good. Sleepers re-check after every offset change.
    """

    def __init__(self, base: ManualClock, offset_ms: int = 0) -> None:
        self.base = base
        self.offset_ms = offset_ms
        self.mono_offset_ms = 0
        self.paused = False
        self._paused_at = 0
        self._resumed: asyncio.Event | None = None
        self._changed: asyncio.Future[None] | None = None

    def now_ms(self) -> int:
        return self.base.now_ms() + self.offset_ms

    def monotonic_ms(self) -> int:
        return self.base.monotonic_ms() + self.mono_offset_ms

    async def sleep_until(self, at_ms: int) -> None:
        await self._sleep(lambda: at_ms - self.offset_ms - self.base.now_ms())

    async def sleep_until_monotonic(self, at_ms: int) -> None:
        await self._sleep(lambda: at_ms - self.monotonic_ms())

    async def _sleep(self, remaining_ms: Callable[[], int]) -> None:
        while True:
            if self.paused:
                await self.gate()
                continue
            left = remaining_ms()
            if left <= 0:
                return
            if self._changed is None:
                self._changed = asyncio.get_running_loop().create_future()
            changed = self._changed
            sleeper = asyncio.ensure_future(self.base.sleep_until(self.base.now_ms() + left))
            try:
                await asyncio.wait([sleeper, changed], return_when=asyncio.FIRST_COMPLETED)
            finally:
                sleeper.cancel()

    async def gate(self) -> None:
        """Return at once, or when the paused process resumes."""
        while self.paused:
            assert self._resumed is not None
            await self._resumed.wait()

    def pause(self) -> None:
        """Stop the process: no wake-ups, no calls, until `resume`."""
        if not self.paused:
            self.paused = True
            self._paused_at = self.base.now_ms()
            self._resumed = asyncio.Event()

    def resume(self, *, frozen: bool = False) -> None:
        """Let the process run again; `frozen`: its clock lost the paused time."""
        if not self.paused:
            return
        self.paused = False
        if frozen:
            lost = self.base.now_ms() - self._paused_at
            self.mono_offset_ms -= lost
            self.set_offset(self.offset_ms - lost)
        assert self._resumed is not None
        self._resumed.set()

    def set_offset(self, offset_ms: int) -> None:
        """Step the clock to a new skew, as NTP does; sleepers re-check."""
        self.offset_ms = offset_ms
        changed, self._changed = self._changed, None
        if changed is not None and not changed.done():
            changed.set_result(None)


class ProcessCrashed(TransportError):
    """A call of a process that has crashed: nothing reaches the broker."""


class FaultyTransport:
    """A member process's `Transport` with faults: pauses, message delays, death.

    Every call waits while the process is paused (`MemberClock.pause`), then
    is delayed by `delay(call)` = ``(before_ms, after_ms)`` of cluster time
    (`call` is the method's name; a tail's reads are ``"tail"`` and
    ``"tail_terms"``, delayed by `after_ms` only):
    `before_ms` delays the request (a call cancelled meanwhile never reaches
    the broker), `after_ms` the response (the broker has acted; the caller
    hears of it late, or never if it gives up). `tail_fault(name)`, if set,
    is awaited on every read of a tail before it is delivered: it may hold
    the read (a stalled or lagging consumer) or raise (a failed poll: the
    read is lost). After `crash`, calls raise
    `ProcessCrashed`, those waiting on a pause or a delay at once, and
    responses are lost. Counts what the broker fenced.
    """

    def __init__(
        self,
        inner: MemoryTransport,
        clock: MemberClock,
        delay: Callable[[str], tuple[int, int]] | None = None,
    ) -> None:
        self.inner = inner
        self.clock = clock
        self.delay = delay
        self.tail_fault: Callable[[str], Awaitable[None]] | None = None
        self.dead = False
        self.delayed_calls = 0
        self.fenced_by_broker: Counter[str] = Counter()
        self.epoch_requests: list[tuple[int, str]] = []
        self._died: asyncio.Future[None] | None = None

    def crash(self) -> None:
        """The process dies: every call in flight and every later one fails."""
        self.dead = True
        if self._died is not None and not self._died.done():
            self._died.set_result(None)

    async def _call(self, name: str, call: Callable[..., Awaitable[T]], *args: Any) -> T:
        await self._pause_point()
        before, after = self.delay(name) if self.delay is not None else (0, 0)
        if before or after:
            self.delayed_calls += 1
        if before:
            await self._sleep(before)
            await self._pause_point()
        try:
            result = await call(*args)
        except FencedError:
            self.fenced_by_broker[name] += 1
            raise
        if after:
            await self._sleep(after)
        await self._pause_point()
        return result

    def _alive(self) -> None:
        if self.dead:
            raise ProcessCrashed("the process crashed")

    async def _pause_point(self) -> None:
        """Wait while the process is paused; fail if it is or becomes dead."""
        self._alive()
        if self.clock.paused:
            await self._unless_dead(self.clock.gate())

    async def _sleep(self, ms: int) -> None:
        base = self.clock.base
        await self._unless_dead(base.sleep_until(base.now_ms() + ms))

    async def _unless_dead(self, waiting: Awaitable[None]) -> None:
        if self._died is None:
            self._died = asyncio.get_running_loop().create_future()
        work = asyncio.ensure_future(waiting)
        try:
            await asyncio.wait([work, self._died], return_when=asyncio.FIRST_COMPLETED)
        finally:
            work.cancel()
        self._alive()

    async def acquire_epoch(
        self, role: str, transaction_timeout: float, current: FencingToken | None = None
    ) -> FencingToken:
        if current is None:
            self.epoch_requests.append((self.clock.base.now_ms(), role))
        return await self._call("acquire_epoch", self.inner.acquire_epoch, role,
                                transaction_timeout, current)

    async def prepare_epoch(self, role: str, transaction_timeout: float, partition: int,
                            outputs: Collection[str] = (), *, wait: bool = False) -> None:
        # Returns at once on the in-process model, `wait` or not: no delay or
        # pause point to add.
        self._alive()
        await self.inner.prepare_epoch(role, transaction_timeout, partition, outputs,
                                       wait=wait)

    async def discard_prepared(self, role: str) -> None:
        self._alive()
        await self.inner.discard_prepared(role)

    async def describe_epoch(self, role: str) -> LeadershipStatus:
        return await self._call("describe_epoch", self.inner.describe_epoch, role)

    async def read_partition(self, partition: int, from_offset: int = 0) -> PartitionRead:
        return await self._call("read_partition", self.inner.read_partition, partition,
                                from_offset)

    async def tail(self, partition: int, from_offset: int, *,
                   role: str | None = None) -> _FaultyTail:
        return _FaultyTail(self, await self.inner.tail(partition, from_offset, role=role),
                           "tail")

    async def topic_facts(self) -> TopicFacts:
        return await self._call("topic_facts", self.inner.topic_facts)

    async def check_topic(self, partitions: int, lease_duration: float | None) -> TopicCheck:
        return await self._call("check_topic", self.inner.check_topic, partitions,
                                lease_duration)

    async def append(self, partition: int, key: bytes, value: bytes | None) -> int:
        return await self._call("append", self.inner.append, partition, key, value)

    async def begin_transaction(self, role: str, token: FencingToken) -> _FaultyTransaction:
        txn = await self._call("begin_transaction", self.inner.begin_transaction, role, token)
        return _FaultyTransaction(self, txn)

    async def release(self, role: str, token: FencingToken) -> None:
        await self._call("release", self.inner.release, role, token)

    # Term mode: the terms topic and the leader's outputs, through the same
    # pauses, delays and death as every other call.

    async def append_term(self, partition: int, key: bytes, value: bytes | None) -> int:
        return await self._call("append_term", self.inner.append_term, partition, key, value)

    async def read_terms(self, partition: int) -> PartitionRead:
        return await self._call("read_terms", self.inner.read_terms, partition)

    async def tail_terms(self, partition: int, from_offset: int, *,
                         role: str | None = None) -> _FaultyTail:
        return _FaultyTail(self, await self.inner.tail_terms(partition, from_offset, role=role),
                           "tail_terms")

    async def check_terms_topic(self, partitions: int) -> TopicCheck:
        return await self._call("check_terms_topic", self.inner.check_terms_topic, partitions)

    async def output_partitions(self, topic: str) -> int:
        return await self._call("output_partitions", self.inner.output_partitions, topic)

    async def output_facts(self, topic: str) -> TopicFacts:
        return await self._call("output_facts", self.inner.output_facts, topic)

    async def write_output(self, topic: str, partition: int, key: bytes | None,
                           value: bytes | None, headers: list[tuple[str, bytes]]) -> int:
        return await self._call("write_output", self.inner.write_output, topic, partition, key,
                                value, headers)


class _FaultyTail:
    """A tail whose reads arrive late by the response delay of `name`, and
    through the transport's `tail_fault`."""

    def __init__(self, transport: FaultyTransport, inner: PartitionTail, name: str) -> None:
        self._transport = transport
        self._inner = inner
        self._name = name
        self._holding: PartitionRead | None = None
        """A read the inner tail returned that this one has not yet (delayed)."""

    async def next(self) -> PartitionRead:
        read = self._holding = await self._inner.next()
        try:
            transport = self._transport
            _, after = transport.delay(self._name) if transport.delay is not None else (0, 0)
            if after:
                await transport._sleep(after)
            if transport.tail_fault is not None:
                await transport.tail_fault(self._name)
            await transport._pause_point()
        finally:
            self._holding = None
        return read

    def returned_to(self) -> int:
        held = self._holding
        if held is not None and held.records:
            return min(self._inner.returned_to(), held.records[0].offset)
        return self._inner.returned_to()

    async def close(self) -> None:
        await self._inner.close()


class _FaultyTransaction:
    def __init__(self, transport: FaultyTransport, inner: GuardedTransaction) -> None:
        self._transport = transport
        self._inner = inner

    async def send(self, topic: str, value: bytes | None, key: bytes | None = None,
                   partition: int | None = None) -> None:
        await self._transport._call("send", self._inner.send, topic, value, key, partition)

    async def write_lease(self, partition: int, key: bytes, value: bytes | None) -> int:
        return await self._transport._call("txn_write_lease", self._inner.write_lease,
                                           partition, key, value)

    async def commit(self) -> None:
        await self._transport._call("commit", self._inner.commit)

    async def abort(self) -> None:
        await self._transport._call("abort", self._inner.abort)

    def abandon(self) -> None:
        self._inner.abandon()

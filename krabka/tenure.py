"""Holding and resigning a role: one tenure, in either fencing mode.

A tenure is a small state machine (`TenureState`): LEADING, then RESIGNING
while `resign()` hands the role back, then ENDED; a fence, a lost producer,
a higher term or the fence deadline moves it from LEADING straight to ENDED.
`fenced()` is true in every state but LEADING, so work that checks it stops
the moment a resignation begins. `krabka.runner` runs a function for
as long as a member leads, campaigning again after each tenure; this module
is the one-tenure primitive under it.

`Leadership` holds what both modes share: the lifecycle, the fence deadline
on the monotonic clock, the renewal loop that retries only what is
retryable, the topic re-check and the order of a resignation. Epoch mode's
tenure (`krabka.epoch.tenure.EpochLeadership`) renews with lease
records through the role's transactional producer; term mode's
(`krabka.term.tenure.TermLeadership`) with heartbeats on the terms
topic, and stamps its writes with its term.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import contextvars
import enum
import hashlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from krabka.clock import Clock
from krabka.errors import FencedError, InvalidStateError, retryable
from krabka.format.token import Token
from krabka.guarded import RecordWriter
from krabka.options import LeadershipOptions
from krabka.registration import deregister
from krabka.runtime.callbacks import contained
from krabka.runtime.cancellation import cancel_and_wait
from krabka.scale.admission import Admission
from krabka.transport import Registrar

__all__ = ["RENEW_JITTER", "Leadership", "TenureState", "renewal_delay_ms"]

log = logging.getLogger("krabka.leadership")

T = TypeVar("T")

# The tenure whose transaction() body the current task runs in (resign from
# there would wait for its own transaction).
_IN_TRANSACTION: contextvars.ContextVar[Leadership | None] = contextvars.ContextVar(
    "coordination_in_transaction", default=None
)

RETRY_INTERVAL_MS = 250

TOPIC_RECHECK_MS = 60_000

RENEW_JITTER = 0.2
"""How much earlier than `renew_interval` a renewal may come, as a fraction of it.

Roles acquired together would otherwise renew together, every interval, in
one burst. Each renewal comes at the interval minus a jitter drawn afresh
in [0, 0.2] of it, so roles taken at one instant renew spread over a fifth
of the interval (2 s of the default 10 s), and since every renewal draws
again their phases keep drifting apart. Never later than without jitter, so
the gap between renewals stays below ``lease - margin`` and the fence
deadline is never at risk; the price is renewing on average every 0.9
intervals, about 11 % more lease writes (a larger window spreads faster
but costs more: 0.5 would cost a third more)."""


def renewal_delay_ms(role: str, member: str, count: int, renew_ms: int) -> int:
    """Milliseconds from one renewal's send to the next: `renew_ms` less a jitter.

    The jitter is in ``[0, RENEW_JITTER * renew_ms]``, a hash of the role,
    the member and the renewal's number in the tenure (`count`, from 0), so
    it differs between the roles of one member and between a role's
    renewals, yet a test on a `ManualClock` sees the same schedule every run.
    """
    digest = hashlib.blake2b(f"{role}\0{member}\0{count}".encode(), digest_size=8).digest()
    fraction = int.from_bytes(digest, "big") / 2**64
    return renew_ms - int(fraction * RENEW_JITTER * renew_ms)


class TenureState(enum.Enum):
    """Where a tenure is in its life."""

    LEADING = "leading"
    """The member holds the role and may write under its token."""
    RESIGNING = "resigning"
    """`resign()` is handing the role back; no new guarded write may start."""
    ENDED = "ended"
    """The tenure is over: resigned, fenced, out of time, or its producer lost."""


_TRANSITIONS: dict[TenureState, frozenset[TenureState]] = {
    TenureState.LEADING: frozenset({TenureState.RESIGNING, TenureState.ENDED}),
    TenureState.RESIGNING: frozenset({TenureState.ENDED}),
    TenureState.ENDED: frozenset(),
}


class Leadership(abc.ABC):
    """A member's tenure of a role, renewed in the background.

    `token` is the tenure's fencing token and stays constant: a
    `FencingToken` in epoch mode, a `TermToken` (ordered, with `.term`) in
    term mode. `tenure` is the offset of the tenure's first record (its
    first lease on the state topic, or its winning claim on the terms
    topic). `state` is the tenure's `TenureState`; `done` completes when it
    is ENDED, and `err` then says why (None after a clean `resign`). Guarded
    writes go through `transaction()`.

    Local deadlines run on the clock's monotonic time, measured from the
    moment the last renewal that counts was sent: a step of this process's
    wall clock cannot extend the time it trusts its tenure. Epoch mode counts
    a lease record once its commit is acknowledged; term mode a heartbeat
    only once the tenure has read it back with its term still the highest
    (`_extend_fence`). The next renewal is scheduled from the last one sent
    and acknowledged, whether it counts yet or not.
    `on_renewed`, if set, is called with each renewal's record (a `Lease` or
    a `Heartbeat`) and its latency in seconds; the admission the tenure was
    taken through, if any, is told of each (`Admission.lease_written`).
    """

    token: Token

    def __init__(
        self,
        registrar: Registrar,
        role: str,
        member: str,
        partition: int,
        tenure: int,
        options: LeadershipOptions,
        clock: Clock,
        sent_monotonic_ms: int,
        sent_wall_ms: int,
    ) -> None:
        self.role = role
        self.member = member
        self.partition = partition
        self.tenure = tenure
        self.options = options
        self.on_renewed: Callable[[object, float], None] | None = None
        self.first_lease_latency = 0.0
        """Seconds from sending the tenure's first record to its acknowledgement."""
        self._admission: Admission | None = None
        self.predecessor_until: int | None = None
        """Epoch ms (this member's wall clock) until which a tenure this one
        superseded while it was live may still run its function, or None.
        `LeaderRunner` starts the function only then."""
        self._registrar = registrar
        self._clock = clock
        self._lock = asyncio.Lock()
        self._state = TenureState.LEADING
        self._sent_mono = sent_monotonic_ms
        self._sent_wall = sent_wall_ms
        self._fence_from_mono = sent_monotonic_ms
        """When the last renewal that counts toward the fence deadline was sent."""
        self._fence_from_wall = sent_wall_ms
        self._renewal_due_mono = sent_monotonic_ms + self.options.renew_ms
        """When the next renewal is due: the last send plus its jittered interval."""
        self._hand_back: asyncio.Future[None] | None = None
        self.err: BaseException | None = None
        self._done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        """Done once the tenure may start its work (`ready`); the mode sets it."""
        self._tasks: list[asyncio.Task[None]] = []

    def _start_tasks(self, *extra: tuple[str, Callable[[], Coroutine[Any, Any, None]]]
                     ) -> None:
        """Start the renewal, the fence deadline's watch, the topic re-check and `extra`.

        Subclasses call it at the end of their constructor, once every
        attribute the tasks read is set.
        """
        work = [("renew", self._renew_loop), ("fence deadline", self._watch_fence_deadline),
                ("topic check", self._watch_topic), *extra]
        self._tasks = [asyncio.create_task(step(), name=f"{name} {self.role}")
                       for name, step in work]

    @property
    def state(self) -> TenureState:
        """The tenure's lifecycle state."""
        return self._state

    @property
    def done(self) -> asyncio.Future[None]:
        """Completes when the tenure is ENDED.

        Shielded: a role function that awaits it and is cancelled (as the
        runner cancels it at the end of a tenure) cancels only its own wait,
        never the tenure's end, which every other waiter relies on.
        """
        return asyncio.shield(self._done)

    async def ready(self) -> None:
        """Return once the role's work may start under this tenure.

        At once in epoch mode: the broker refuses a superseded epoch's writes
        whenever they arrive. In term mode once every partition of every
        declared output carries this term's barrier: from then on any record
        of an older term either is already on its partition, before the
        barrier, or lands after it and every `TermFilter` drops it. Raises
        `FencedError` if the tenure ends first. `LeaderRunner` waits for it
        before it starts the function; a caller of `acquire_leadership`
        should too before it reads its outputs or acts on the role.
        """
        await self._bounded(asyncio.shield(self._ready))

    def _mark_ready(self) -> None:
        if not self._ready.done():
            self._ready.set_result(None)

    @property
    def fence_deadline_monotonic(self) -> int:
        """The fence deadline on the clock's monotonic milliseconds: what `fenced()` uses."""
        return self._fence_from_mono + self.options.lease_ms - self.options.margin_ms

    @property
    def fence_deadline(self) -> int:
        """The fence deadline as an epoch-ms instant, for display and logs.

        It is the send time on the wall clock of the last renewal that counts
        (in epoch mode, the lease's `granted_at`) plus the lease, less the
        fence margin. The
        decision is taken on the monotonic clock (`fenced()`, `remaining()`):
        compare against those, not against the wall clock, which can step.
        """
        return self._fence_from_wall + self.options.lease_ms - self.options.margin_ms

    def remaining(self) -> float:
        """Seconds until the fence deadline (monotonic); 0 once fenced."""
        if self._state is not TenureState.LEADING:
            return 0.0
        return max(0.0, (self.fence_deadline_monotonic - self._clock.monotonic_ms()) / 1000)

    def renewal_overdue(self) -> float:
        """Seconds since the next renewal was due (monotonic; negative while it is
        not yet due): how long renewals have been failing.

        Due is the last renewal's send plus its jittered interval
        (`renewal_delay_ms`), the instant the renewal was actually scheduled.
        """
        return (self._clock.monotonic_ms() - self._renewal_due_mono) / 1000

    def fenced(self) -> bool:
        """Whether this member must stop acting on the role now.

        True from the moment a resignation begins, once the tenure ended, and
        once the fence deadline has passed on the monotonic clock.
        """
        return (self._state is not TenureState.LEADING
                or self._clock.monotonic_ms() >= self.fence_deadline_monotonic)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[RecordWriter]:
        """A group of writes under the role's token.

        Commits on a clean exit and discards on an exception. Raises
        `FencedError` on entry once `fenced()` is true, and from `send` or the
        exit when the tenure ended or the fence deadline passed. Keep it
        short: the tenure's renewals and its resignation wait for it. The
        mode's own guarantees are in its subclass.
        """
        self._check_open()
        # Waiting here is bounded by the holder: a renewal or a transaction, each
        # bounded by the end of the tenure. A plain acquire is cancellation-safe.
        await self._lock.acquire()
        inside = _IN_TRANSACTION.set(self)
        try:
            self._check_open()
            async with self._guarded() as writer:
                yield writer
        finally:
            _IN_TRANSACTION.reset(inside)
            self._lock.release()

    @abc.abstractmethod
    def _guarded(self) -> contextlib.AbstractAsyncContextManager[RecordWriter]:
        """The mode's own transaction, entered with the tenure's lock held."""

    async def resign(self, *, deregister: bool = True) -> None:
        """Hand the role back now.

        From the first instant `fenced()` is true and no new guarded write
        starts; an open one is waited for (it is bounded by the end of the
        tenure). Then the mode's hand-back (`_hand_back_steps`), which lets
        the next member take over at once; and, unless `deregister` is False,
        this member's registration is removed.

        Call it after a tenure ended on its own too: it then releases what is
        left. It does not raise for a failed step: the tenure ends with the
        first such error in `err`. Raises `InvalidStateError` when called
        inside this tenure's `transaction()`. Cancelling the call does not
        stop the hand-back.
        """
        if _IN_TRANSACTION.get() is self:
            raise InvalidStateError(
                f"{self.role}: resign() was called inside this tenure's transaction(); it "
                "would wait for that transaction forever: leave the transaction first"
            )
        if self._hand_back is None:
            if self._state is TenureState.LEADING:
                self._move(TenureState.RESIGNING)
            self._hand_back = asyncio.ensure_future(self._resign_steps(leave=deregister))
        await asyncio.shield(self._hand_back)

    async def _resign_steps(self, *, leave: bool) -> None:
        errors: list[BaseException] = []
        try:
            async with self._lock:
                await self._stop_tasks()
                errors += await self._hand_back_steps()
                if leave:
                    try:
                        await deregister(self._registrar, self.partition, self.role,
                                         self.member)
                    except Exception as exc:
                        errors.append(exc)
        except BaseException as exc:
            errors.append(exc)
            raise
        finally:
            if errors:
                log.warning("%s: %s resigned %s with errors: %r", self.role, self.member,
                            self.token, errors)
            else:
                log.info("%s: %s resigned %s", self.role, self.member, self.token)
            self._end(errors[0] if errors else None)

    @abc.abstractmethod
    async def _hand_back_steps(self) -> list[BaseException]:
        """Give the role up (the renewals have stopped); return the errors met."""

    @abc.abstractmethod
    async def _write_renewal(self) -> None:
        """Write the next renewal and record it with `_renewed`."""

    @abc.abstractmethod
    async def _check_topics(self) -> None:
        """Re-check the topics the tenure depends on (`StateTopicError` if one changed)."""

    def _renewal_guard(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """What a renewal holds while it writes: nothing, unless the mode needs it."""
        return contextlib.nullcontext()

    def _check_open(self) -> None:
        if self._state is TenureState.RESIGNING:
            raise FencedError(f"{self.role}: the leadership is resigning")
        if self.fenced():
            raise FencedError(f"{self.role}: the tenure of {self.token} is over ({self.err})")

    async def _bounded(self, awaitable: Awaitable[T]) -> T:
        """Await `awaitable`, but raise `FencedError` once the tenure ends."""
        if self.fenced() and asyncio.iscoroutine(awaitable):
            awaitable.close()
        self._raise_if_over()
        work = asyncio.ensure_future(awaitable)
        waiters: list[asyncio.Future[Any]] = [work, self._done]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            work.cancel()
            raise
        if work.done():
            return work.result()
        await cancel_and_wait(work)
        raise FencedError(f"{self.role}: the tenure of {self.token} ended: {self.err}")

    def _raise_if_over(self) -> None:
        if self._state is TenureState.ENDED or (
            self._clock.monotonic_ms() >= self.fence_deadline_monotonic
        ):
            raise FencedError(f"{self.role}: the tenure of {self.token} is over ({self.err})")

    def _began(self, first_lease_latency: float, admission: Admission | None) -> None:
        """The candidate's last word: how long the first record took, and the
        admission the tenure was taken through (told of it, and of every renewal)."""
        self.first_lease_latency = first_lease_latency
        self._admission = admission
        if admission is not None:
            contained(self.role, "the admission's lease_written", admission.lease_written,
                      first_lease_latency)

    def _renewed(self, record: object, sent_monotonic_ms: int, sent_wall_ms: int, *,
                 counts: bool = True) -> None:
        """A renewal sent at `sent_monotonic_ms` was acknowledged: the next is
        scheduled from it, and unless `counts` is False it extends the fence
        deadline at once (term mode extends it later, by `_extend_fence`)."""
        self._sent_mono = sent_monotonic_ms
        self._sent_wall = sent_wall_ms
        if counts:
            self._extend_fence(sent_monotonic_ms, sent_wall_ms)
        latency = (self._clock.monotonic_ms() - sent_monotonic_ms) / 1000
        if self._admission is not None:
            contained(self.role, "the admission's lease_written", self._admission.lease_written,
                      latency)
        if self.on_renewed is not None:
            contained(self.role, "the renewal observer", self.on_renewed, record, latency)

    def _extend_fence(self, sent_monotonic_ms: int, sent_wall_ms: int) -> None:
        """Count the renewal sent at `sent_monotonic_ms` toward the fence deadline."""
        if sent_monotonic_ms > self._fence_from_mono:
            self._fence_from_mono = sent_monotonic_ms
            self._fence_from_wall = sent_wall_ms

    async def _renew_loop(self) -> None:
        count = 0
        while not self._done.done():
            delay = renewal_delay_ms(self.role, self.member, count, self.options.renew_ms)
            self._renewal_due_mono = self._sent_mono + delay
            await self._clock.sleep_until_monotonic(self._renewal_due_mono)
            await self._renew()
            count += 1

    async def _renew(self) -> None:
        """Write the next renewal, retrying a `TransportError` until the fence deadline.

        Any other error ends the tenure at once with it in `err`: a bug in a
        transport is not an outage to wait out.
        """
        due = self._clock.monotonic_ms()
        while True:
            try:
                async with self._renewal_guard():
                    if self._sent_mono >= due:
                        return
                    await self._write_renewal()
                    return
            except Exception as exc:
                if not retryable(exc):
                    self._end(exc)
                    return
                log.warning("%s: renewal failed, retrying until the fence deadline: %r",
                            self.role, exc)
            await self._clock.sleep_until_monotonic(self._clock.monotonic_ms()
                                                    + RETRY_INTERVAL_MS)

    async def _watch_fence_deadline(self) -> None:
        # Renewals move the deadline, so re-arm until it passes.
        while self._clock.monotonic_ms() < self.fence_deadline_monotonic:
            await self._clock.sleep_until_monotonic(self.fence_deadline_monotonic)
        self._end(FencedError(
            f"{self.role}: the tenure of {self.token} could not be renewed before the fence "
            "deadline"
        ))

    async def _watch_topic(self) -> None:
        """Re-check the topics while leading; a changed partition count ends the tenure.

        Another partition count would send new members of this role to
        another partition, splitting its order: stop and tell the operator. A
        `TransportError` only postpones the check; any other error ends the
        tenure.
        """
        while not self._done.done():
            await self._clock.sleep_until_monotonic(self._clock.monotonic_ms()
                                                    + TOPIC_RECHECK_MS)
            try:
                await self._check_topics()
            except Exception as exc:
                if not retryable(exc):
                    self._end(exc)
                    return
                log.warning("%s: could not re-check the topics: %r", self.role, exc)

    async def _stop_tasks(self) -> None:
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()
        for task in self._tasks:
            if task is not current:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def _move(self, to: TenureState) -> None:
        if to not in _TRANSITIONS[self._state]:
            raise InvalidStateError(
                f"{self.role}: a tenure cannot move from {self._state.value} to {to.value}"
            )
        self._state = to

    def _end(self, err: BaseException | None) -> None:
        if self._state is TenureState.ENDED:
            return
        self._move(TenureState.ENDED)
        self.err = err
        self._done.set_result(None)
        if err is not None:
            log.warning("%s: tenure of %s ended: %s", self.role, self.token, err)
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()

"""Holding and resigning a role: one tenure.

A tenure is a small state machine (`TenureState`): LEADING, then RESIGNING
while `resign()` hands the role back, then ENDED; a fence, a lost producer
or the fence deadline moves it from LEADING straight to ENDED. `fenced()` is
true in every state but LEADING, so work that checks it stops the moment a
resignation begins. `coordination.runner` runs a function for as long as a
member leads, campaigning again after each tenure; this module is the
one-tenure primitive under it.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from coordination.clock import Clock
from coordination.errors import (
    CoordinationError,
    EpochLostError,
    FencedError,
    InvalidStateError,
    OutcomeUnknownError,
    retryable,
)
from coordination.guarded import IN_TRANSACTION, GuardedWriter, commit_lease
from coordination.options import LeadershipOptions
from coordination.records import (
    Lease,
    encode_key,
    encode_lease,
    lease_key,
    registration_key,
)
from coordination.token import FencingToken
from coordination.transport import GuardedTransaction, Transport

__all__ = ["Leadership", "TenureState", "hand_back"]

log = logging.getLogger("coordination.leadership")

T = TypeVar("T")

RETRY_INTERVAL_MS = 250

TOPIC_RECHECK_MS = 60_000


async def hand_back(
    transport: Transport,
    role: str,
    token: FencingToken,
    partition: int,
    lease_duration: float,
    *,
    tombstone: bool,
    retire_epoch: bool,
) -> list[BaseException]:
    """Give `token` up: retire its epoch, then tombstone its lease, and always
    close its producer. Returns the errors met (a fence is not an error here:
    it means a successor already holds the role).

    The epoch is retired first, while the lease is still live: no standby
    challenges before the lease deadline, so no successor can have minted
    an epoch, let alone opened a transaction, that the bump could abort
    (Kafka aborts the current epoch's open transaction on a conditional
    InitProducerId that names a superseded epoch of the same producer id).
    The tombstone then goes through the same producer under the bumped
    epoch, which nobody holds as a token; only its commit lets a successor
    start. `retire_epoch` is False once the tenure's fence deadline has
    passed: a challenger may then be under way, so the epoch is left to the
    successor's InitProducerId and the tombstone is sent under `token`
    (refused, and invisible, if a successor already took the role).

    Runs in a task of its own that a cancelled caller still waits for, so
    the producer is closed by the time the cancellation propagates.
    """
    errors: list[BaseException] = []
    held = token  # the epoch the role's producer writes under

    async def steps() -> None:
        nonlocal held
        # Each step is tried whatever the one before met: an epoch that could
        # not be retired is retired by the successor's InitProducerId, and a
        # lease that could not be cleared lapses.
        superseded = False
        try:
            if retire_epoch:
                try:
                    if await _token_still_current(transport, role, token):
                        held = await transport.acquire_epoch(role, lease_duration,
                                                             current=token)
                    else:
                        superseded = True
                except FencedError:
                    superseded = True
                except Exception as exc:
                    errors.append(exc)
            if tombstone and not superseded:
                try:
                    with contextlib.suppress(FencedError):
                        await commit_lease(transport, role, held, partition,
                                           encode_key(lease_key(role)), None)
                except Exception as exc:
                    errors.append(exc)
        finally:
            try:
                with contextlib.suppress(FencedError):
                    await transport.release(role, held)
            except Exception as exc:
                errors.append(exc)

    await _through_cancellation(asyncio.ensure_future(steps()))
    return errors


async def _through_cancellation(work: asyncio.Future[None]) -> None:
    """Wait for `work` to finish even if the caller is cancelled meanwhile,
    then deliver the cancellation.

    For clean-up that must be over when the caller's cancellation arrives
    (its steps are each bounded by the transport), so that a cancelled
    `acquire_leadership` has handed its epoch back by the time it raises.
    """
    cancelled = False
    while not work.done():
        try:
            await asyncio.shield(work)
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError


async def _token_still_current(transport: Transport, role: str, token: FencingToken) -> bool:
    """Whether the coordinator still holds `token` for `role`.

    Kafka checks only the producer id of a conditional InitProducerId before
    it aborts an ongoing transaction: sent with a superseded epoch while a
    successor's transaction is open, it fences the successor (found by the
    real-process fault runs; verified on Kafka 4.4.0). So a leader whose
    token is already superseded never sends it.
    """
    status = await transport.describe_epoch(role)
    return status.token == token


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


class Leadership:
    """A member's tenure of a role, renewed in the background.

    `token` is the tenure's fencing token and stays constant; `tenure` is the
    offset of its first lease record. `state` is the tenure's `TenureState`;
    `done` completes when it is ENDED, and `err` then says why (None after a
    clean `resign`). Guarded writes go through `transaction()`.

    Local deadlines run on the clock's monotonic time, measured from the
    moment each lease write was sent: a step of this process's wall clock
    cannot extend the time it trusts its lease. `on_renewed`, if set, is
    called with each renewed lease and the renewal's latency in seconds.
    """

    def __init__(
        self,
        transport: Transport,
        role: str,
        member: str,
        partition: int,
        token: FencingToken,
        tenure: int,
        lease: Lease,
        options: LeadershipOptions,
        clock: Clock,
        lease_sent_monotonic_ms: int,
    ) -> None:
        self.role = role
        self.member = member
        self.partition = partition
        self.token = token
        self.tenure = tenure
        self.lease = lease
        self.options = options
        self.on_renewed: Callable[[Lease, float], None] | None = None
        self.first_lease_latency = 0.0
        """Seconds from sending the tenure's first lease record to its commit."""
        self.predecessor_until: int | None = None
        """Epoch ms (this member's wall clock) until which a tenure this one
        superseded while it was live may still run its function, or None.
        `LeaderRunner` starts the function only then."""
        self._transport = transport
        self._clock = clock
        self._key = encode_key(lease_key(role))
        self._lock = asyncio.Lock()
        self._state = TenureState.LEADING
        self._lease_sent_mono = lease_sent_monotonic_ms
        self._renewal_due = False
        self._hand_back: asyncio.Future[None] | None = None
        self.err: BaseException | None = None
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._tasks = [
            asyncio.create_task(self._renew_loop(), name=f"renew {role}"),
            asyncio.create_task(self._watch_fence_deadline(), name=f"fence deadline {role}"),
            asyncio.create_task(self._watch_topic(), name=f"topic check {role}"),
        ]

    @property
    def state(self) -> TenureState:
        """The tenure's lifecycle state."""
        return self._state

    @property
    def fence_deadline_monotonic(self) -> int:
        """The fence deadline on the clock's monotonic milliseconds: what `fenced()` uses."""
        return self._lease_sent_mono + self.options.lease_ms - self.options.margin_ms

    @property
    def fence_deadline(self) -> int:
        """The fence deadline as an epoch-ms instant, for display and logs.

        It is the written lease deadline less the fence margin. The decision
        is taken on the monotonic clock (`fenced()`, `remaining()`): compare
        against those, not against the wall clock, which can step.
        """
        return self.lease.deadline - self.options.margin_ms

    def remaining(self) -> float:
        """Seconds until the fence deadline (monotonic); 0 once fenced."""
        if self._state is not TenureState.LEADING:
            return 0.0
        return max(0.0, (self.fence_deadline_monotonic - self._clock.monotonic_ms()) / 1000)

    def fenced(self) -> bool:
        """Whether this member must stop acting on the role now.

        True from the moment a resignation begins, once the tenure ended, and
        once the fence deadline has passed on the monotonic clock.
        """
        return (self._state is not TenureState.LEADING
                or self._clock.monotonic_ms() >= self.fence_deadline_monotonic)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[GuardedWriter]:
        """One Kafka transaction under the role's token.

        Commits on a clean exit and aborts on an exception. Raises
        `FencedError` on entry once `fenced()` is true, and from `send` or the
        exit when the epoch moved on or the fence deadline passed (then
        nothing sent becomes visible). A commit still unanswered at the fence
        deadline plus the fence margin raises `OutcomeUnknownError`: it may
        yet commit. An error of the transport's begin or commit other than a
        `TransportError` ends the tenure too (a bug is not an outage). Keep
        it short: the coordinator aborts a transaction open longer than the
        lease, which fences this leader.
        """
        self._check_open()
        # Waiting here is bounded by the holder: a renewal or a transaction, each
        # bounded by the end of the tenure. A plain acquire is cancellation-safe.
        await self._lock.acquire()
        inside = IN_TRANSACTION.set(self)
        try:
            self._check_open()
            try:
                txn = await self._begin()
            except Exception as exc:
                if not retryable(exc):
                    self._end(exc)
                raise
            try:
                yield GuardedWriter(self, txn)
            except BaseException as exc:
                if isinstance(exc, (FencedError, EpochLostError)):
                    self._end(exc)
                await self._abort_quietly(txn)
                raise
            await self._commit(txn)
        finally:
            IN_TRANSACTION.reset(inside)
            self._lock.release()

    async def resign(self, *, deregister: bool = True) -> None:
        """Hand the role back now.

        From the first instant `fenced()` is true and no new guarded write
        starts; an open one is waited for (it is bounded by the end of the
        tenure). Then a conditional bump of the epoch if this tenure's token
        is still current (asked first, see `_token_still_current`), so it
        stops being authoritative while no successor can exist yet; a lease
        tombstone through the tenure's own producer, under the bumped epoch
        (a deposed leader's is never visible), which lets the next member
        take over at once; the producer is closed whatever happened before;
        and, unless `deregister` is False, this member's registration is
        removed. After the fence deadline the epoch is not bumped (a
        challenger may be under way): the tombstone goes under the token.

        Call it after a tenure ended on its own too: it then closes the
        producer (and clears the lease if nobody took over). It does not
        raise for a failed step: the tenure ends with the first such error in
        `err` (a lease that could not be cleared lapses on its own). Raises
        `InvalidStateError` when called inside this tenure's `transaction()`.
        Cancelling the call does not stop the hand-back.
        """
        if IN_TRANSACTION.get() is self:
            raise InvalidStateError(
                f"{self.role}: resign() was called inside this tenure's transaction(); it "
                "would wait for that transaction forever: leave the transaction first"
            )
        if self._hand_back is None:
            if self._state is TenureState.LEADING:
                self._move(TenureState.RESIGNING)
            self._hand_back = asyncio.ensure_future(self._resign_steps(deregister))
        await asyncio.shield(self._hand_back)

    async def _resign_steps(self, deregister: bool) -> None:
        errors: list[BaseException] = []
        try:
            async with self._lock:
                await self._stop_tasks()
                errors += await hand_back(
                    self._transport, self.role, self.token, self.partition,
                    self.options.lease_duration, tombstone=True,
                    retire_epoch=self._clock.monotonic_ms() < self.fence_deadline_monotonic,
                )
                if deregister:
                    try:
                        await self._transport.append(
                            self.partition,
                            encode_key(registration_key(self.role, self.member)), None,
                        )
                    except Exception as exc:
                        errors.append(exc)
        except BaseException as exc:
            errors.append(exc)
            raise
        finally:
            if errors:
                log.warning("%s: %s resigned token %s with errors: %r", self.role, self.member,
                            self.token, errors)
            else:
                log.info("%s: %s resigned token %s", self.role, self.member, self.token)
            self._end(errors[0] if errors else None)

    def _check_open(self) -> None:
        if self._state is TenureState.RESIGNING:
            raise FencedError(f"{self.role}: the leadership is resigning")
        if self.fenced():
            raise FencedError(f"{self.role}: the tenure of {self.token} is over ({self.err})")

    async def _begin(self) -> GuardedTransaction:
        """Open a transaction; if the caller gives up meanwhile, abort it again.

        The begin itself is shielded and awaited to its end (the transport
        bounds it), so a transaction it opened is never left open.
        """
        begin = asyncio.ensure_future(self._transport.begin_transaction(self.role, self.token))
        try:
            return await self._bounded(asyncio.shield(begin))
        except BaseException:
            with contextlib.suppress(Exception):
                await self._abort_quietly(await begin)
            raise

    async def _commit(self, txn: GuardedTransaction) -> None:
        lease = None
        sent = 0
        try:
            if self._renewal_due:
                lease = self._next_lease()
                sent = self._clock.monotonic_ms()
                await self._bounded(
                    txn.write_lease(self.partition, self._key, encode_lease(lease))
                )
            self._raise_if_over()
            await self._commit_within_tenure(txn)
        except OutcomeUnknownError:
            raise  # the commit is in flight: there is nothing left to abort
        except Exception as exc:
            if not retryable(exc):
                self._end(exc)  # fenced, out of time, or a bug of the transport
            await self._abort_quietly(txn)
            raise
        except BaseException:
            # Cancelled too: a commit cancelled before it reached the broker
            # would leave the transaction open, hiding the partition's tail.
            await self._abort_quietly(txn)
            raise
        if lease is not None:
            self._renewed(lease, sent)

    async def _commit_within_tenure(self, txn: GuardedTransaction) -> None:
        """Commit, waiting at most until the fence deadline plus the fence margin.

        A commit once sent cannot be recalled, so reaching the limit does not
        make it fail: the caller is told the outcome is unknown and is not
        held past the end of its tenure.
        """
        limit = self.fence_deadline_monotonic + self.options.margin_ms
        commit = asyncio.ensure_future(txn.commit())
        timer = asyncio.ensure_future(self._clock.sleep_until_monotonic(limit))
        try:
            await asyncio.wait({commit, timer}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            commit.cancel()
            raise
        finally:
            timer.cancel()
        if commit.done():
            commit.result()
            return
        commit.cancel()
        raise OutcomeUnknownError(
            f"{self.role}: the commit under {self.token} was unanswered at the fence deadline "
            f"plus the margin ({self.options.fence_margin:g} s); it may still commit"
        )

    async def _abort_quietly(self, txn: GuardedTransaction) -> None:
        """Abort, bounded by the end of the tenure; best effort.

        Once the tenure has ended, the abort is not sent: a broker that may
        be gone would hold a cancelled function past its tenure. The
        transaction is abandoned instead: the producer aborts it before its
        next transaction, so the hand-back's tombstone can still be written
        (otherwise the producer refuses it as a second open transaction and
        the lease has to lapse), and the coordinator aborts it at its
        timeout if nothing comes next.
        """
        if self._state is TenureState.ENDED:
            txn.abandon()
            return
        try:
            await self._bounded(txn.abort())
        except CoordinationError as exc:  # the tenure may be over already: best effort
            log.debug("%s: abort after a failed transaction: %r", self.role, exc)
        except Exception as exc:
            # A bug of the transport: the transaction may still be open, hiding
            # the partition's tail. End the tenure; the caller's error goes on.
            log.error("%s: aborting a failed transaction raised %r", self.role, exc)
            self._end(exc)

    async def _bounded(self, awaitable: Awaitable[T]) -> T:
        """Await `awaitable`, but raise `FencedError` once the tenure ends."""
        if self.fenced() and asyncio.iscoroutine(awaitable):
            awaitable.close()
        self._raise_if_over()
        work = asyncio.ensure_future(awaitable)
        waiters: list[asyncio.Future[Any]] = [work, self.done]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            work.cancel()
            raise
        if work.done():
            return work.result()
        work.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await work
        raise FencedError(f"{self.role}: the tenure of {self.token} ended: {self.err}")

    def _raise_if_over(self) -> None:
        if self._state is TenureState.ENDED or (
            self._clock.monotonic_ms() >= self.fence_deadline_monotonic
        ):
            raise FencedError(f"{self.role}: the tenure of {self.token} is over ({self.err})")

    def _next_lease(self) -> Lease:
        now = self._clock.now_ms()
        token = self.token
        return Lease(self.member, token.producer_id, token.producer_epoch, now,
                     now + self.options.lease_ms)

    def _renewed(self, lease: Lease, sent_monotonic_ms: int) -> None:
        self.lease = lease
        self._lease_sent_mono = sent_monotonic_ms
        self._renewal_due = False
        if self.on_renewed is not None:
            latency = (self._clock.monotonic_ms() - sent_monotonic_ms) / 1000
            try:
                self.on_renewed(lease, latency)
            except Exception:  # an observer's bug must not end the tenure
                log.exception("%s: the renewal observer failed", self.role)

    async def _renew_loop(self) -> None:
        while not self.done.done():
            await self._clock.sleep_until_monotonic(self._lease_sent_mono
                                                    + self.options.renew_ms)
            await self._renew()

    async def _renew(self) -> None:
        """Write the next lease record, retrying a `TransportError` until the
        fence deadline.

        A renewal due while a guarded transaction is open rides inside it. Any
        other error ends the tenure at once with it in `err`: a bug in a
        transport is not an outage to wait out.
        """
        due = self._clock.monotonic_ms()
        self._renewal_due = True
        while True:
            try:
                async with self._lock:
                    if self._lease_sent_mono >= due:
                        return
                    lease = self._next_lease()
                    sent = self._clock.monotonic_ms()
                    await commit_lease(
                        self._transport, self.role, self.token, self.partition, self._key,
                        encode_lease(lease),
                    )
                    self._renewed(lease, sent)
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
            f"{self.role}: the lease of {self.token} could not be renewed before the fence "
            "deadline"
        ))

    async def _watch_topic(self) -> None:
        """Re-check the state topic while leading; a changed partition count ends the tenure.

        Another partition count would send new members of this role to
        another partition, splitting its order: stop and tell the operator. A
        `TransportError` only postpones the check; any other error ends the
        tenure.
        """
        while not self.done.done():
            await self._clock.sleep_until_monotonic(self._clock.monotonic_ms()
                                                    + TOPIC_RECHECK_MS)
            try:
                await self._transport.check_topic(
                    self.options.partitions, self.options.lease_duration
                )
            except Exception as exc:
                if not retryable(exc):
                    self._end(exc)
                    return
                log.warning("%s: could not re-check the state topic: %r", self.role, exc)

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
        self.done.set_result(None)
        if err is not None:
            log.warning("%s: tenure of %s ended: %s", self.role, self.token, err)
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()

"""Epoch mode's tenure: lease records through the role's transactional producer.

`EpochLeadership` is the `Leadership` `acquire_leadership` returns with
``fencing="epoch"`` (the default). Every write goes through the producer
the tenure's epoch binds, so the broker refuses a superseded tenure's writes
(docs/design.md#the-safety-argument). `GuardedWriter` is what the body of
its `transaction()` sends with. `hand_back` is the one way an epoch is
given up, by a resignation and by a cancelled acquisition alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from krabka.clock import Clock
from krabka.errors import (
    CoordinationError,
    EpochLostError,
    FencedError,
    OutcomeUnknownError,
    retryable,
)
from krabka.format.records import Lease, encode_key, encode_lease, lease_key
from krabka.format.token import FencingToken
from krabka.guarded import RecordWriter, commit_lease
from krabka.options import LeadershipOptions
from krabka.runtime.cancellation import through_cancellation
from krabka.tenure import Leadership, TenureState
from krabka.transport import GuardedTransaction, Transport

__all__ = ["EpochLeadership", "GuardedWriter", "hand_back"]

log = logging.getLogger("krabka.leadership")


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

    await through_cancellation(asyncio.ensure_future(steps()))
    return errors


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


class GuardedWriter:
    """Sends records inside a guarded transaction of an epoch-mode tenure.

    Every send is awaited through `bounded`, the tenure's bound: it raises
    `FencedError` once the tenure ends, so a send never outlives its tenure.
    """

    def __init__(self, txn: GuardedTransaction,
                 bounded: Callable[[Awaitable[None]], Awaitable[None]]) -> None:
        self._txn = txn
        self._bounded = bounded

    async def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
    ) -> None:
        """Add a record to the transaction; visible only if the commit succeeds."""
        await self._bounded(self._txn.send(topic, value, key, partition))


class EpochLeadership(Leadership):
    """An epoch-mode tenure: `token` is the role's `FencingToken`.

    Renewals are lease records, each in a transaction of its own, or inside
    the caller's open `transaction()` when one is due meanwhile. `lease` is
    the latest lease record written.
    """

    token: FencingToken

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
        super().__init__(transport, role, member, partition, tenure, options, clock,
                         lease_sent_monotonic_ms, lease.granted_at)
        self.token = token
        self.lease = lease
        self._transport = transport
        self._key = encode_key(lease_key(role))
        self._renewal_due = False
        self._mark_ready()
        self._start_tasks()

    @contextlib.asynccontextmanager
    async def _guarded(self) -> AsyncIterator[RecordWriter]:
        """One Kafka transaction under the role's token.

        Commits on a clean exit and aborts on an exception. `send` and the
        exit raise `FencedError` when the epoch moved on or the fence
        deadline passed (then nothing sent becomes visible). A commit still
        unanswered at the fence deadline plus the fence margin raises
        `OutcomeUnknownError`: it may yet commit. An error of the transport's
        begin or commit other than a `TransportError` ends the tenure too (a
        bug is not an outage). The coordinator aborts a transaction open
        longer than the lease, which fences this leader.
        """
        try:
            txn = await self._begin()
        except Exception as exc:
            if not retryable(exc):
                self._end(exc)
            raise
        try:
            yield GuardedWriter(txn, self._bounded)
        except BaseException as exc:
            if isinstance(exc, (FencedError, EpochLostError)):
                self._end(exc)
            await self._abort_quietly(txn)
            raise
        await self._commit(txn)

    async def _hand_back_steps(self) -> list[BaseException]:
        """A conditional bump of the epoch if this tenure's token is still
        current (asked first, see `_token_still_current`), so it stops being
        authoritative while no successor can exist yet; a lease tombstone
        through the tenure's own producer, under the bumped epoch (a deposed
        leader's is never visible), which lets the next member take over at
        once; and the producer closed whatever happened before. After the
        fence deadline the epoch is not bumped (a challenger may be under
        way): the tombstone goes under the token.
        """
        return await hand_back(
            self._transport, self.role, self.token, self.partition,
            self.options.lease_duration, tombstone=True,
            retire_epoch=self._clock.monotonic_ms() < self.fence_deadline_monotonic,
        )

    async def _check_topics(self) -> None:
        await self._transport.check_topic(self.options.partitions, self.options.lease_duration)

    def _renewal_guard(self) -> contextlib.AbstractAsyncContextManager[object]:
        # A renewal due while a guarded transaction is open rides inside it.
        return self._lock

    async def _renew(self) -> None:
        self._renewal_due = True
        await super()._renew()

    async def _write_renewal(self) -> None:
        lease = self._next_lease()
        sent = self._clock.monotonic_ms()
        await commit_lease(self._transport, self.role, self.token, self.partition, self._key,
                           encode_lease(lease))
        self._lease_renewed(lease, sent)

    def _lease_renewed(self, lease: Lease, sent_monotonic_ms: int) -> None:
        self.lease = lease
        self._renewal_due = False
        self._renewed(lease, sent_monotonic_ms, lease.granted_at)

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
            self._lease_renewed(lease, sent)

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

    def _next_lease(self) -> Lease:
        now = self._clock.now_ms()
        token = self.token
        return Lease(self.member, token.producer_id, token.producer_epoch, now,
                     now + self.options.lease_ms)

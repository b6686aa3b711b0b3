"""The producer a role's epoch binds, and its transactions.

`acquire_epoch` starts one aiokafka producer with ``transactional.id = role``;
its InitProducerId minted the epoch, so every lease record and guarded write of
the tenure goes through it and the broker rejects them once a newer epoch
exists (docs/design.md#the-kafka-adapter).

aiokafka's transaction API needs three guards to keep that promise:

* **Fences surface in several shapes** (see `krabka.kafka.errors`); every
  one becomes `FencedError`, and the producer is then closed and forgotten:
  a fenced producer can never write again.
* **After a fence the producer is FATAL** and ``commit_transaction()`` /
  ``abort_transaction()`` / ``begin_transaction()`` raise ``AssertionError``
  (an invalid state transition), not a Kafka error. The state is checked
  before each of them; a fatal state caused by a fence is `FencedError`, any
  other is `ProducerFatalError`.
* **Nothing is bounded**: a delivery future of a transactional producer never
  expires, and commit/abort wait for EndTxn forever (shielded, so cancelling
  the caller does not stop them). Every wait here is bounded by the role's
  transaction timeout: an operation slower than that has outlived its
  transaction, which the coordinator aborts with an epoch bump anyway. A
  producer whose operation timed out is closed and forgotten.

A caller cancelled mid-transaction (the leadership cancels a renewal at the
fence deadline) leaves the producer in a transaction or mid-commit. The next
`begin` settles that first: it waits for a pending commit or abort to finish,
or aborts the abandoned transaction, so no cancellation wedges the producer.

A lease record that is the first record of its transaction, and the commit of a
transaction that holds only such a record (every renewal), go out as requests
of our own (`krabka.kafka.producer.direct_lease`), which cost a fraction of
aiokafka's producer machinery. Such a step runs as a task of its own, bounded
like every other: a cancelled caller leaves it running to its end, as aiokafka
leaves its own sends and commits running, and the next `begin` or abort waits
for it first.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from aiokafka import errors as _errors  # type: ignore[import-untyped, unused-ignore]

from krabka.errors import FencedError, InvalidStateError
from krabka.format.token import FencingToken
from krabka.kafka.aiokafka_internals import (
    TransactionState,
    begin_transaction,
    fatal_cause,
    is_fatal,
    move_to_epoch,
    producer_identity,
    transaction_state,
    undelivered_futures,
    wait_for_transaction_end,
)
from krabka.kafka.errors import (
    KafkaTransportError,
    KafkaUnavailableError,
    ProducerFatalError,
    fence_in,
    is_outage,
)
from krabka.kafka.lifecycle import stop_producer
from krabka.kafka.producer import direct_lease
from krabka.runtime.cancellation import bounded, within

__all__ = ["KafkaGuardedTransaction", "RoleProducer"]

log = logging.getLogger("krabka.kafka")

T = TypeVar("T")


class RoleProducer:
    """A started transactional producer and the token its InitProducerId minted."""

    def __init__(
        self,
        role: str,
        producer: Any,
        topic: str,
        timeout: float,
        on_retired: Callable[[RoleProducer, BaseException], None],
    ) -> None:
        self.role = role
        self.producer = producer
        self.topic = topic
        self.timeout = timeout
        self.token = FencingToken(*producer_identity(producer))
        self.retired: BaseException | None = None
        self._on_retired = on_retired
        self._open: KafkaGuardedTransaction | None = None
        # A direct step still running, perhaps without its caller.
        self._flight: asyncio.Future[Any] | None = None

    async def begin(self) -> KafkaGuardedTransaction:
        """Open a transaction; one at a time per producer."""
        self._raise_if_retired()
        if self._open is not None and not self._open.finished:
            raise InvalidStateError(f"{self.role}: a transaction is already open")
        await self._settle()
        begin_transaction(self.producer)
        self._open = KafkaGuardedTransaction(self)
        return self._open

    async def close(self) -> None:
        """Close the producer (bounded); its epoch cannot write through it again."""
        if self.retired is None:
            self.retired = FencedError(f"{self.role}: the producer of {self.token} was released")
        self._ground()
        await stop_producer(self.producer)

    def state(self) -> Any:
        return transaction_state(self.producer)

    async def settle(self) -> None:
        """Bring the producer back to READY: no transaction of its own is open."""
        self._raise_if_retired()
        await self._settle()

    def rebind(self, token: FencingToken) -> None:
        """Write under `token` from now on: the coordinator bumped this producer's
        epoch (a conditional InitProducerId sent over another client).

        aiokafka only learns a producer id and epoch from its own InitProducerId
        at start, and its public `set_pid_and_epoch` may run only once per
        producer, so the pair is replaced in the transaction manager directly
        (`krabka.kafka.aiokafka_internals.move_to_epoch`). The
        producer is READY (`settle` ran before the bump), so no batch holds the
        old pair; sequence numbers restart at 0, as the broker expects of a new
        epoch.
        """
        state = transaction_state(self.producer)
        if state != TransactionState.READY:
            raise KafkaTransportError(
                f"{self.role}: cannot move the producer of {self.token} to {token} in state "
                f"{state.name}")
        move_to_epoch(self.producer, token.producer_id, token.producer_epoch)
        self.token = token

    async def call(self, work: Awaitable[T], what: str, *,
                   bound: Callable[[Awaitable[T], float], Awaitable[T]] = bounded) -> T:
        """Await `work` within the transaction timeout, classifying every failure."""
        if self.retired is not None:
            if asyncio.iscoroutine(work):
                work.close()
            raise again_after(self.retired)
        try:
            return await bound(work, self.timeout)
        except TimeoutError as exc:
            raise await self.retire(KafkaUnavailableError(
                f"{self.role}: {what} did not complete within the transaction timeout "
                f"({self.timeout:g} s); the producer of {self.token} is closed"
            )) from exc
        except (FencedError, KafkaTransportError):
            raise
        except Exception as exc:
            error = await self.failure(exc, what)
            if error is exc:
                raise
            raise error from exc

    async def failure(self, exc: BaseException, what: str) -> BaseException:
        """The error to raise for `exc`; retires the producer if it cannot go on.

        A fence or a fatal state wins whatever the shape of `exc` (aiokafka
        raises ``AssertionError`` once fatal). Other Kafka errors become a
        retryable `KafkaTransportError`; anything else is a bug, returned as
        it is so that it is never retried as an outage.
        """
        fence = fence_in(exc)
        if fence is not None:
            return await self.retire(FencedError(
                f"{self.role}: {what} was fenced: {self.token} is superseded ({fence!r})"
            ))
        if is_fatal(self.producer):
            return await self._retire_fatal(what)
        if not is_outage(exc):
            return exc
        return KafkaTransportError(f"{self.role}: {what} failed: {exc!r}")

    async def retire(self, error: BaseException, *, level: int = logging.WARNING) -> BaseException:
        """Mark the producer unusable, close it and tell the transport to forget it."""
        if self.retired is None:
            self.retired = error
            self._on_retired(self, error)
            log.log(level, "%s: closing the producer of %s: %s", self.role, self.token, error)
            self._ground()
            await stop_producer(self.producer)
            _retrieve_failures(self.producer)
            if self._open is not None:
                for delivery in self._open._pending:
                    _retrieve(delivery)
        return error

    async def direct(self, work: Coroutine[Any, Any, T], what: str) -> T:
        """Run a direct step within the transaction timeout, as `call` does, in
        a task that a cancelled caller leaves running (`land` waits for it)."""
        flight = asyncio.ensure_future(self._direct(work, what))
        flight.add_done_callback(_retrieve)
        self._flight = flight
        try:
            result: T = await asyncio.shield(flight)
        except asyncio.CancelledError:
            # The step was stopped because the producer is being closed
            # (`_ground`), not its caller: say why, as any later call would.
            caller = asyncio.current_task()
            if (flight.cancelled() and self.retired is not None
                    and caller is not None and not caller.cancelling()):
                raise again_after(self.retired) from None
            raise
        return result

    async def _direct(self, work: Coroutine[Any, Any, T], what: str) -> T:
        # The step is already a task of its own, so it is bounded in that task
        # (`within`), not in one more (`bounded`): at 8 000 held roles the
        # extra task, its asyncio.wait and its timer were a third of the
        # worker's time (docs/benchmarks.md).
        try:
            return await self.call(work, what, bound=within)
        except direct_lease.ProducerStateLost as exc:
            raise await self.retire(ProducerFatalError(
                f"{self.role}: {what}: the producer of {self.token} is out of step with the "
                f"broker ({exc.cause!r})")) from exc.cause

    async def land(self) -> None:
        """Wait for a direct step still running; its outcome went to its caller."""
        flight, self._flight = self._flight, None
        if flight is not None and not flight.done():
            await asyncio.wait({flight})

    def _ground(self) -> None:
        """Stop a direct step of a producer being closed (it would retry its
        Produce over closed connections until the timeout), unless it is the
        step that is closing it."""
        flight = self._flight
        if flight is not None and flight is not asyncio.current_task():
            flight.cancel()

    def _raise_if_retired(self) -> None:
        if self.retired is not None:
            raise again_after(self.retired)

    async def _retire_fatal(self, what: str) -> BaseException:
        cause = _fatal_cause(self.producer)
        if fence_in(cause) is not None:
            error: BaseException = FencedError(
                f"{self.role}: {what}: {self.token} is superseded ({cause!r})")
        else:
            error = ProducerFatalError(
                f"{self.role}: {what}: the producer of {self.token} failed fatally ({cause!r})")
        error.__cause__ = cause
        return await self.retire(error)

    async def _settle(self) -> None:
        """Bring the producer back to READY after an abandoned transaction."""
        await self.land()
        for _ in range(3):  # a pending end, then perhaps an abort after it failed
            if is_fatal(self.producer):
                raise await self._retire_fatal("the producer")
            state = transaction_state(self.producer)
            if state == TransactionState.READY:
                return
            if state in (TransactionState.COMMITTING_TRANSACTION,
                         TransactionState.ABORTING_TRANSACTION):
                await self._quietly(asyncio.shield(wait_for_transaction_end(self.producer)),
                                    "the previous transaction's end")
            elif state in (TransactionState.IN_TRANSACTION, TransactionState.ABORTABLE_ERROR):
                log.info("%s: aborting an abandoned transaction before the next", self.role)
                await self._quietly(self.producer.abort_transaction(),
                                    "aborting an abandoned transaction")
            else:
                break
        raise KafkaTransportError(
            f"{self.role}: the producer of {self.token} is stuck in state "
            f"{transaction_state(self.producer).name}; release and acquire the role again"
        )

    async def _quietly(self, work: Awaitable[Any], what: str) -> None:
        try:
            await self.call(work, what)
        except KafkaTransportError as exc:
            # A failed commit of an abandoned transaction is that transaction's
            # loss, not the next one's; a fence or fatal state is raised above.
            if self.retired is not None:
                raise
            log.info("%s: %s failed: %r", self.role, what, exc)


class KafkaGuardedTransaction:
    """One open transaction of a role's producer (`GuardedTransaction`)."""

    def __init__(self, owner: RoleProducer) -> None:
        self._owner = owner
        self._pending: list[asyncio.Future[Any]] = []
        self._direct = False  # a record went out directly (`direct_lease.write`)
        self.finished = False

    async def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
    ) -> None:
        """Enqueue a record; delivery is awaited by `commit` (or fails it)."""
        await self._enqueue(topic, value, key, partition, "a guarded send")

    async def write_lease(self, partition: int, key: bytes, value: bytes | None) -> int:
        """Send a lease record to the state topic and wait for its offset.

        The transaction's first record goes out directly; aiokafka's producer
        sends any other, and this one too when the direct write could not begin.
        """
        owner = self._owner
        if not self._pending and not self._direct:
            self._check_open()
            await self._check_state("a lease write")
            offset = await owner.direct(direct_lease.write(
                owner.producer, owner.topic, partition, key, value,
                int(owner.timeout * 1000)), "a lease write")
            if offset is not None:
                self._direct = True
                return offset
        delivery = await self._enqueue(owner.topic, value, key, partition, "a lease write")
        metadata = await owner.call(asyncio.shield(delivery), "a lease write")
        return int(metadata.offset)

    async def commit(self) -> None:
        """Wait for every send, then commit; `FencedError` if the epoch moved on."""
        self._check_open()
        owner = self._owner
        try:
            if self._pending:
                await owner.call(asyncio.shield(asyncio.gather(*self._pending)),
                                 "delivering the transaction's records")
            await self._check_state("the commit")
            if self._direct and not self._pending:
                await owner.direct(direct_lease.commit(owner.producer), "the commit")
            else:
                await owner.call(owner.producer.commit_transaction(), "the commit")
        finally:
            self.finished = True

    async def abort(self) -> None:
        """Abort; nothing sent becomes visible. A no-op once the transaction ended."""
        if self.finished:
            return
        self.finished = True
        owner = self._owner
        if owner.retired is not None:
            return  # closed: the coordinator aborts what was open
        await owner.land()
        if owner.retired is not None:
            return
        state = owner.state()
        if state in (TransactionState.COMMITTING_TRANSACTION,
                     TransactionState.ABORTING_TRANSACTION):
            await owner.call(asyncio.shield(wait_for_transaction_end(owner.producer)),
                             "the abort")
            return
        if state not in (TransactionState.IN_TRANSACTION, TransactionState.ABORTABLE_ERROR):
            await self._check_state("the abort")
            return
        await owner.call(owner.producer.abort_transaction(), "the abort")

    def abandon(self) -> None:
        """Give the transaction up without waiting; the next `begin` settles it."""
        self.finished = True

    def _check_open(self) -> None:
        if self.finished:
            raise InvalidStateError(f"{self._owner.role}: the transaction has already ended")

    async def _check_state(self, what: str) -> None:
        owner = self._owner
        owner._raise_if_retired()
        if is_fatal(owner.producer):
            raise await owner._retire_fatal(what)

    async def _enqueue(
        self, topic: str, value: bytes | None, key: bytes | None, partition: int | None,
        what: str,
    ) -> asyncio.Future[Any]:
        self._check_open()
        # A record that already failed (the broker answered 47 to a Produce
        # after the coordinator aborted the transaction) ends the transaction
        # here rather than at commit.
        for earlier in self._pending:
            if earlier.done() and not earlier.cancelled() and earlier.exception():
                raise await self._owner.failure(earlier.exception() or Exception(), what)
        await self._check_state(what)
        delivery: asyncio.Future[Any] = await self._owner.call(
            self._owner.producer.send(topic, value, key=key, partition=partition), what
        )
        self._pending.append(delivery)
        return delivery


def _fatal_cause(producer: Any) -> BaseException:
    cause = fatal_cause(producer)
    if cause is not None:
        return cause
    fallback: BaseException = _errors.KafkaError("the producer is in the FATAL_ERROR state")
    return fallback


def _retrieve(future: asyncio.Future[Any] | None) -> None:
    """Mark a failed future's exception as seen: it is reported as our error."""
    if future is not None and future.done() and not future.cancelled():
        future.exception()


def _retrieve_failures(producer: Any) -> None:
    """Mark aiokafka's internal futures failed by a fence as seen.

    The sender fails the transaction waiter and every queued batch (its future
    and drain waiter); nobody awaits those once the producer is closed, and
    asyncio would log each as an exception never retrieved.
    """
    for future in undelivered_futures(producer):
        _retrieve(future)


def again_after(error: BaseException) -> BaseException:
    """A fresh exception for a call after a producer retired with `error`."""
    if isinstance(error, FencedError):
        return FencedError(str(error))
    if isinstance(error, ProducerFatalError):
        return ProducerFatalError(str(error))
    return ProducerFatalError(f"the producer is closed: {error}")

"""The worker's changes to Faust's producer side: its aiokafka ``Producer``, the
``ProducerBuffer`` that holds table writes, the ``TransactionManager``, and the
aiokafka client the producer builds (`app.faust_changes.registry` declares them).

Each class here is a mixin for one of Faust's classes, which the worker's app
builds its own subclasses from; Faust's classes are never changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import IllegalOperation, KafkaConnectionError, KafkaError
from aiokafka.producer.sender import Sender

__all__ = ["COORDINATOR_RETRIES", "FLUSH_SECONDS", "AtLeastOnceFlushDrains",
           "CommitFlushesFirst", "CommitsSideBySide", "CoordinatorRetryProducer",
           "CoordinatorRetrySender", "FencedProducersStopped", "LateWritesDropped",
           "SendsCounted", "SendsUnderWay", "UnflushedWritesError", "WorkerClientProducer",
           "flush_buffer"]

log = logging.getLogger("app.faust_changes")

FLUSH_SECONDS = 5.0
"""The longest a commit's flush waits without a table write being sent."""

COORDINATOR_RETRIES = 10
"""How many times a worker's Faust producer looks its coordinator up again after
the connection was lost during the lookup, before the error propagates (AIOKAFKA-1)."""


class UnflushedWritesError(RuntimeError):
    """A commit's flush sent none of the producer buffer's table writes it waits for
    in `FLUSH_SECONDS`: the commit fails rather than commit offsets ahead of them."""

    def __init__(self, buffered: int, sending: int) -> None:
        super().__init__(f"{buffered} table writes still buffered and {sending} being sent, "
                         f"none sent in the last {FLUSH_SECONDS:g} s: the commit fails "
                         "rather than commit offsets ahead of them")
        self.buffered = buffered
        self.sending = sending


class SendsUnderWay:
    """The table writes a producer buffer has taken from its queue and not yet sent,
    and how many it has sent.

    Faust's buffer counts only what waits in its queue (``ProducerBuffer.size``):
    its sending task takes a write off the queue, then awaits the send, and in
    between the write is in neither count nor transaction (FAUST-4). That one
    task sends the writes one at a time in queue order, so the writes present
    at any moment are all sent once `sent` has grown by their number.
    """

    def __init__(self) -> None:
        self.count = 0
        """Writes taken off the queue and not yet sent."""
        self.sent = 0
        """Writes sent (or dropped) since the buffer was made."""
        self.waiting = 0
        """Flushes waiting for a send to end (`next_send`)."""
        self._ended = asyncio.Event()

    def started(self) -> None:
        self.count += 1

    def ended(self) -> None:
        self.count -= 1
        self.sent += 1
        self._ended.set()
        self._ended = asyncio.Event()

    async def next_send(self) -> None:
        """Wait until the send under way (or the next one) ends."""
        ended = self._ended
        self.waiting += 1
        try:
            await ended.wait()
        finally:
            self.waiting -= 1


class SendsCounted:
    """FAUST-4 on ``ProducerBuffer``: the buffer counts the writes its task is sending."""

    under_way: SendsUnderWay

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.under_way = SendsUnderWay()

    async def _send_pending(self, fut: Any) -> None:
        self.under_way.started()
        try:
            await super()._send_pending(fut)  # type: ignore[misc]
        finally:
            self.under_way.ended()


class LateWritesDropped:
    """FAUST-5 on ``ProducerBuffer``: a write whose transaction has ended is dropped.

    It belongs to an event whose offset the ended transaction did not commit (an
    event is acked after its writes are buffered, and a commit first sends every
    write buffered or being sent), so the partition's next owner folds it again."""

    async def _send_pending(self, fut: Any) -> None:
        try:
            await super()._send_pending(fut)  # type: ignore[misc]
        except IllegalOperation as exc:
            # aiokafka's send raises it only for a transactional producer that is
            # not in a transaction: the one the consumer's final commit ended.
            log.info("a table write made after its partition's transaction ended is dropped; "
                     "the event that made it was not committed and is folded again (%s)", exc)
            fut.cancel()


async def flush_buffer(buffer: Any) -> None:
    """Send every table write buffered or being sent when the flush starts into the
    transactions still open.

    Every caller commits offsets next, and an offset committed ahead of its
    event's table write loses the write if the worker dies before the next
    commit. The flush waits for exactly the writes present at its start (the
    fold goes on buffering while it waits, and a flush that chased those would
    never end), however long they take while sends go on; when `FLUSH_SECONDS`
    pass without one being sent, it raises `UnflushedWritesError`. A buffer
    that is not running sends nothing (Faust's own flush would raise). The
    buffer is the worker's, with `SendsCounted`.
    """
    under_way: SendsUnderWay = buffer.under_way
    loop = asyncio.get_running_loop()
    target = under_way.sent + under_way.count + buffer.size
    sent = under_way.sent
    deadline = loop.time() + FLUSH_SECONDS
    while under_way.sent < target and buffer.state == "running":
        if under_way.sent != sent:
            sent, deadline = under_way.sent, loop.time() + FLUSH_SECONDS
        left = deadline - loop.time()
        if left <= 0:
            raise UnflushedWritesError(buffer.size, under_way.count)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(under_way.next_send(), left)


class CommitFlushesFirst:
    """FAUST-4 on ``Producer``: a transactional commit first sends the table writes
    of the events whose offsets it commits (outside the transaction locks that
    each buffered send takes)."""

    buffer: Any

    async def commit_transactions(self, tid_to_offset_map: Mapping[str, Any], group_id: str,
                                  start_new_transaction: bool = True) -> None:
        await flush_buffer(self.buffer)
        await super().commit_transactions(  # type: ignore[misc]
            tid_to_offset_map, group_id, start_new_transaction=start_new_transaction)


class AtLeastOnceFlushDrains:
    """FAUST-16 on ``Producer``: the flush before an at-least-once commit drains the
    buffer, or fails the commit as the transactional one does."""

    buffer: Any

    async def flush(self) -> None:
        await flush_buffer(self.buffer)
        await super().flush()  # type: ignore[misc]


class CommitsSideBySide:
    """FAUST-7 on ``Producer``: the partitions of a commit end their transactions
    side by side, each under its own producer's lock, and the first failure is
    raised once all have ended. A copy of Faust's method, applied only on the
    version it was written for."""

    _trn_locks: Any
    _transaction_producers: Any

    async def commit_transactions(self, tid_to_offset_map: Mapping[str, Any], group_id: str,
                                  start_new_transaction: bool = True) -> None:
        results = await asyncio.gather(
            *(self._commit_one(transactional_id, offsets, group_id, start_new_transaction)
              for transactional_id, offsets in tid_to_offset_map.items()),
            return_exceptions=True)
        # Every commit has ended before the first failure is raised, so none is
        # left running behind a crash (ProducerFenced is what Faust's caller catches).
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def _commit_one(self, transactional_id: str, offsets: Mapping[Any, int],
                          group_id: str, start_new_transaction: bool) -> None:
        async with self._trn_locks[transactional_id]:
            producer = self._transaction_producers.get(transactional_id)
            if producer is None:
                log.warning("commit invoked for unknown transaction %s", transactional_id)
                return
            if not producer._txn_manager.is_in_transaction():
                log.info("transaction %s already ended; nothing to commit", transactional_id)
                return
            await producer.send_offsets_to_transaction(offsets, group_id)
            await producer.commit_transaction()
            if start_new_transaction:
                await producer.begin_transaction()


class FencedProducersStopped:
    """FAUST-11 on ``TransactionManager``: at each rebalance, before Faust's own step,
    every transactional producer whose transactional id none of the new active
    partitions has is stopped, so a partition assigned back gets a new producer."""

    producer: Any

    async def on_rebalance(self, assigned: set[Any], revoked: set[Any],
                           newly_assigned: set[Any]) -> None:
        active = self._tps_to_transactional_ids(assigned)  # type: ignore[attr-defined]
        producer = self.producer
        for transactional_id in sorted(set(producer._transaction_producers) - active):
            log.info("stopping the transactional producer %s: its partition is no longer "
                     "active here", transactional_id)
            await producer.stop_transaction(transactional_id)
        await super().on_rebalance(assigned, revoked, newly_assigned)  # type: ignore[misc]


class CoordinatorRetrySender(Sender):
    """aiokafka's ``Sender``, whose coordinator lookup is retried after a connection
    lost during it, at most `COORDINATOR_RETRIES` times (AIOKAFKA-1)."""

    async def _find_coordinator(self, coordinator_type: Any, coordinator_key: str) -> Any:
        retries = 0
        while True:
            try:
                return await super()._find_coordinator(coordinator_type, coordinator_key)
            except KafkaError as exc:
                if (not isinstance(exc.__cause__, KafkaConnectionError)
                        or retries == COORDINATOR_RETRIES):
                    raise
            retries += 1
            await self.client.force_metadata_update()
            await asyncio.sleep(self._retry_backoff)


class WorkerClientProducer(AIOKafkaProducer):
    """The aiokafka producer the worker's Faust producers build: its sender is a
    `CoordinatorRetrySender` (AIOKAFKA-1).

    aiokafka builds the sender in ``AIOKafkaProducer.__init__`` by its module's
    name for ``Sender`` and offers no setting for its class (no extension point),
    so the built one is made the subclass, which adds behaviour only, no state."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._sender.__class__ = CoordinatorRetrySender


class CoordinatorRetryProducer:
    """AIOKAFKA-1 on Faust's ``Producer``: its aiokafka clients are `WorkerClientProducer`."""

    @property
    def _producer_type(self) -> type[AIOKafkaProducer]:
        return WorkerClientProducer

"""Patches for eleven faust-streaming 0.15.3 bugs, five of its slow paths and one
aiokafka 0.14 bug (in the worker's Faust producers only), applied
when the worker app is built. All were seen on the local broker (docs/app.md).

1. Recovery high watermarks. Under ``processing_guarantee="exactly_once"``
Faust's table recovery asks the consumer thread for each changelog
partition's high watermark and gets
aiokafka's *cached* last stable offset, which is None until the consumer has
fetched from that partition. A partition a worker has just been assigned (a
standby promoted after another worker died, or any partition after a restart
with a kept data directory) then reports highwater -1, and recovery either
crashes with ``ConsistencyError`` ("persisted offset ... is higher than the
last offset in that topic (highwater) (49 > -1)") or, with the consistency
check off, stops reading the changelog too early. Seen on the local broker
when a worker was SIGKILLed (docs/app.md).

The fix asks the broker instead: aiokafka's ``end_offsets`` sends ListOffsets
with the consumer's isolation level, which for a read_committed consumer is
the last stable offset itself.

2. Commits racing at shutdown, and table writes left out of the commit.
On stop, the consumer's final commit (which ends each partition's
transaction without starting another) can run while the periodic commit is
waiting for the same producer; the second then sends offsets to a producer
that is no longer in a transaction, aiokafka raises
``IllegalOperation("Not in the middle of a transaction")``, the consumer
crashes and the worker exits non-zero. A producer that is not in a
transaction has nothing uncommitted, so its commit is skipped: at worst the
offsets stay where the last commit put them and records are folded again
(the fold ignores records at or below a value's last applied offset).
And a table write is not sent when it is made: it waits in the producer's
buffer for a task to send it, while the event that made it is acked at once.
Under exactly_once Faust commits without flushing that buffer (it flushes
only in the non-transactional branch of ``Consumer._commit_offsets``), so a
commit can carry the offset of an event whose changelog write is still in
the buffer. The write then lands in the next transaction (lost if the
worker dies before that commits), or, after the final commit at shutdown,
in none: ``IllegalOperation("Can't send messages while not in
transaction")`` crashes the buffer and a worker stopped with SIGTERM exits
1 (seen in a rolling restart: a worker stopped just as its recovery ended).
So the commit flushes the buffer first, outside the transaction locks that
each buffered send takes, and a flush that cannot finish within
`FLUSH_SECONDS` fails the commit (`UnflushedWritesError`): the offsets are
never committed ahead of their table writes, and the worker's crash leaves
the partition's uncommitted records to be folded again. And it waits for the writes under way: the
buffer's sending task takes a write off its queue and then awaits the send,
and Faust's count of buffered writes (``ProducerBuffer.size``) no longer
includes it, so a flush that went by the count alone let the commit go
ahead of that write (`SendsUnderWay`). Seen on the local broker: a worker
stopped cleanly committed a lease's ``elected`` event and its offset, and
its final commit ended the transaction before the role's table value
reached it; the value was dropped (2c), and the partition's next owner,
restoring the value from before the lease, folded the tenure's next
renewal as a new tenure.

2b. Table writes left out of an at-least-once commit. Without transactions
(term mode, docs/app.md#term-mode) Faust flushes the producer before it
commits offsets, but ``ProducerBuffer.flush`` gives up after 0.1 s without
a send, so on a busy worker a commit can carry the offset of an event whose
changelog write is still buffered: a worker SIGKILLed then restores a value
older than its committed offsets, and the records between are never folded
again (seen on the local broker: a term-mode standby took a partition over
without the holder's heartbeats and the next term's claim). So
``Producer.flush`` drains the buffer as the transactional commit does,
before it waits for the client's own sends, and fails the commit as that one
does when the buffer cannot be drained.

2c. A table write made after the final commit. The consumer's final commit
(``commit_and_end_transactions``, from its ``on_stop``) can come while an
agent is still processing an event: ``App._stop_consumer`` waits for the
streams only when the consumer has an assignment, and the consumer's own
``wait_empty`` loops only while the consumer is not stopping. A table write
the agent then makes reaches the buffer after the final commit's flush,
aiokafka raises ``IllegalOperation("Can't send messages while not in
transaction")`` in the buffer's send task, the buffer crashes and a worker
stopped with SIGTERM exits 1 (seen in CI: a worker stopped 24 ms after it
was ready). That write belongs to an event whose offset the ended
transaction did not commit (an event is acked after its writes are
buffered, and the commit sends what was buffered or being sent before the
offsets it carries), so the next owner of the partition folds the event
again: the buffer drops the write, cancelling its future, and goes on.

3. A rebalance during table recovery. ``Recovery._restart_recovery`` waits
for the active changelogs with ``self._wait(...)``, which raises
``RebalanceAgain`` when another rebalance starts meanwhile; but that one wait
sits in a ``try`` whose ``except Exception`` only closes a tracing span and
does not re-raise (faust/tables/recovery.py, lines 464-471 in 0.15.3). The
superseded recovery then goes on to its standby phase with the *new*
generation's standby partitions, whose offsets it never read (``None``
placeholders), and ``consumer.seek(tp, None)`` raises ``ValueError("Offset
must be a positive integer")``: the Recovery service crashes and the worker
exits. Under exactly_once the active wait lasted at least ten seconds (the
end is found only after two 5 s idle polls, before patch 4), so any peer that
leaves and comes back within that time after a worker (re)started triggered it
(docs/upstream-faust.md). The fix: ``_wait`` raises ``RebalanceAgain`` at
once when a newer rebalance is already pending, before it starts the awaited
step; the loop then restarts recovery for the new generation, as it does
when the signal comes during a wait. Applied only to the faust-streaming
versions it was checked on (`app.faust_internals.FAUST`).

4. Ten idle seconds at the end of every table recovery under exactly_once.
A transactional changelog ends with a commit marker, which a consumer never
receives, so the last record's offset stays below the recovery's highwater
and the recovery's own test of its end never passes. The end is found by
``detect_aborted_tx`` (the consumer's position has reached the highwater),
which ``Recovery._slurp_changelogs`` calls only after two consecutive 5 s
waits on an empty changelog queue: a worker restarted with 10 000 roles
read its changelog in about 4 s and then waited 10 more
(docs/upstream-faust.md, item 2). The position test is what decides; the
wait is only when it runs. So the changelog queue's ``get`` gives up after
`RECOVERY_IDLE` seconds without an event, with the ``TimeoutError`` the
loop's own 5 s ``wait_for`` would raise, and the end is found 0.5 s after
the last record. Applied only to the versions it was checked on, with 3.

5. A recovery that ends before the records it fetched are in the table.
``detect_aborted_tx`` marks a partition recovered when the consumer's
position has reached the highwater, and from then on the loop drops every
event of that partition at or below the highwater as already seen. But the
position moves when aiokafka hands a fetch's records to Faust's consumer
thread, and the records reach the changelog queue only later: the thread
decodes the whole fetch first (18 000 records of a 10 000-role changelog:
about 0.6 s), then the main loop's fetcher puts them in the queue one by
one. A position read in that window is past records the table never gets.
With patch 4's short idle polls the first fetch of a restarted worker fell
in it at about every second start, and the worker became ready with some
partitions' roles missing (0 of 10 000 once), for good; with Faust's 10 s
it takes a stall that long. The fix: the main loop's consumer notes each
batch it takes from its thread as in flight until the fetcher asks for the
next one (it has then put every record in the queues) and the changelog
queue is empty; while records are in flight, a position is answered as the
first offset among them for their partition, so the recovery's test waits
for its next idle polls. Only the table recovery asks the main loop's
consumer for positions, from the loop that empties the changelog queue,
which is why the answer must not wait for the queue (that deadlocked).
Applied with 3 and 4.

6. Partitions committed one after another. Each partition of the state
topic's group has its own transactional producer, and Faust's
``Producer.commit_transactions`` ends their transactions in turn: sending
offsets and EndTxn, about three round trips each. Every tick (one per owned
partition each second) makes every partition commit, so an event of the
last partition waited for sixteen commits (p50 97 ms for a commit of eight
or more partitions, against 33 ms side by side; docs/benchmarks.md). The
commits now run side by side, each under its own producer's lock, and the
first failure is raised once all have ended.

7. Fetches held back 100 ms behind a partition not yet drained. aiokafka's
fetcher sends no fetch to a broker while any partition of that broker holds
records the application has not taken, for up to its ``prefetch_backoff``
(0.1 s, not a consumer setting), so a lease committed meanwhile waits. In
Faust's consumer thread that is the normal case: a fetch brings the
worker's own events, ticks and changelog records, and the main loop takes
them only when it asks for its next batch. On the local broker a lease
reached the fold agent p99 100 ms after it was written, 16 % of them after
such a wait; with no backoff, p99 30 ms. A partition whose records are
still held is left out of the next fetch either way, so no backoff fetches
nothing twice; it only stops one partition from holding back the others.

8. A connection lost during FindCoordinator kills a transactional producer
(aiokafka 0.14, not Faust). ``Sender._find_coordinator`` retries a
coordinator not available and a node not ready, but re-raises a connection
that closes in the middle of the request (a broker restarting) as a plain
``KafkaError``. That ends the producer's sender task: the producer can never
send again, Faust's next commit raises, the consumer crashes and the worker
exits. Seen in ``tests/app/test_app_ready_broker.py``: the worker crashed
just after its broker came back. The lookup is now retried as aiokafka
retries a node not ready: a metadata update, the retry backoff, and again,
at most `COORDINATOR_RETRIES` times, after which the error propagates as
before. Only the worker's Faust producers do so: Faust's aiokafka
``Producer`` builds its clients as a `WorkerProducer`, whose sender is a
`CoordinatorRetrySender`. aiokafka's own ``Sender`` is left as it is, and so
are the producers of the coordination library, which the worker runs
beside Faust's and which retry on their own terms.

9. Every other request of the consumer thread queued behind a 1.5 s long
poll. Faust creates its worker consumer with ``fetch_max_wait_ms=1500``, a
literal, not a setting. A broker answers the requests of one connection in
order, and the consumer sends its ListOffsets on the connection it fetches
on, so on an idle topic each ListOffsets waits for the fetch before it,
up to 1.5 s: the table recovery's high watermarks and earliest offsets,
one after the other, and the readiness probe. A worker with nothing to
recover spent 2.5 s of its start-up in those two steps of its recovery.
The fetcher reads the wait at each fetch, so the started consumer's is set
to `FETCH_MAX_WAIT_MS` (Kafka's own consumer waits 0.5 s by default). A
fetch still returns as soon as records arrive; an idle worker now sends a
fetch every 0.1 s instead of every 1.5 s.

10. A second's sleep before every start's table recovery. ``TableManager.
on_start`` sleeps one second before it closes the list of tables
(``_update_channels``) and starts the recovery, so that tables made just
after the worker started still make it. Every table of this app is made when
the app is built, before the worker starts, and a table made once the list
is closed is refused loudly by Faust ("Too late to add tables at this
point"), never lost. So the manager starts at once: that second was 1 of
the 2.6 s a worker with nothing to recover took to be ready (after 9).
Applied with 3, on the versions it was checked on.

11. A partition's transactional producer kept after the partition went to
another worker. Under exactly_once each partition of the group has a
producer of its own (transactional id ``<app>-<group>-<partition>``), and
``TransactionManager.on_rebalance`` stops the producers of the partitions
revoked from this worker, but it picks them out of the revoked set with
``not assignor.is_standby(tp)`` under the *new* assignment, and a partition
that went to another worker usually comes back to this one as a standby:
its producer is never stopped. The other worker's producer, of the same
transactional id, fences it. When the partition is assigned back, Faust
begins a transaction on the fenced producer (it only logs "Invalid state
transition IN_TRANSACTION -> IN_TRANSACTION"), the next commit gets
``ProducerFenced``, and Faust crashes the worker. Seen on the local broker
in every run of the long group-change script with two workers, at the
same change: one worker alone, another joins (``python -m
tests.faults.group_changes --long --workers 2``, change 11). The fix: at
each rebalance, before Faust's own step, stop every transactional producer
whose transactional id none of the worker's new active partitions has; a
partition assigned back then gets a new producer, whose InitProducerId
fences the other worker's instead.

12. A record skipped for good at the end of a rebalance. Faust's table
recovery ends (``Recovery.on_recovery_completed``) by resuming the stream
partitions, seeking them to their committed offsets, and resuming the flow
control, which empties every stream's queue even when the flow is already
active (the recovery resumed it to read the changelogs). Records the fetcher
handed to the streams in between are thrown away, but the fetch loop
(``Consumer._drain_messages``) has counted them as read: fetched again, any
below the last one it handed over is skipped as already read, and never
fetched again if the seek came first. The records after it are handled, and
the commit goes past it (Faust's commit lets one missing offset through). Seen
on the local broker: the state topic's first lease of a tenure, at offset 59,
never folded (the events named the next renewal as the tenure's start), and
in the Faust example reader, a restarted worker that never handled the first
record written while it was down (4 runs in 60 under load). The fix has two
parts. A resume empties the queues only when the flow was suspended: then a
rebalance is under way, and its seek re-reads every partition from the
committed offsets. And the fetch loop hands each offset of a stream
partition to the streams once between two emptyings, so a record it fetches
again after a seek, whose event is already queued or handled, is not handed
over twice; an explicit seek of a partition makes it read that partition's
records again. The changelogs go through as before: the table recovery seeks
and reads them again. Applied with 3, on the versions it was checked on.

13. A recovery that ends a partition before it has read any of it. Faust's
changelog loop, whenever its queue has been idle for two polls, ends each
active partition whose consumer position has reached the high watermark
(``detect_aborted_tx``, patch 4). It runs beside the recovery, so it can
compare between the recovery's first steps (the high watermarks and start
offsets of a new assignment) and its seek of the partitions, while the
position is still where an earlier fetch left it. A fetch Faust dropped
because the flow stopped under it ("getmany called while flow not active",
which seeks back only the partitions with committed offsets, never a
changelog) leaves a newly assigned changelog partition's position past
records the recovery never got. Seen on the local broker: a worker given two
state partitions in a rebalance logged "Aborted tx until highwater" for
both changelog partitions 30 ms after it built their offsets, read none of
their records, and folded the roles' next renewals as new tenures. The fix:
from the recovery's first step for the active partitions until it has sought
them, a partition's position is answered as the offset the recovery will
read it from. Applied with 3, on the versions it was checked on.

14. Records of paused partitions fetched while no partition is active. Faust
pauses a partition by leaving it out of its consumer's set of active
partitions; aiokafka goes on fetching it, and the consumer thread asks
aiokafka's ``Fetcher.fetched_records`` for the records of the active set
only. But that filter reads an *empty* set as "every partition". Faust asks
only while the set is not empty (``Consumer._wait_next_records``), but it
hands aiokafka the live set, which aiokafka reads again each time records
arrive while it waits (up to a second). The table recovery empties the set
for a moment: when it has read the active changelogs it pauses them, and it
resumes the standbys only after their offsets are sought (tens of
milliseconds), with the stream partitions paused throughout. A fetch in that
window returns what aiokafka has prefetched for the paused stream
partitions, and the fetch loop drops each record whose partition is paused
as it comes to it. When the recovery resumes the stream partitions while the
loop is part way through that batch, a partition's later records are handed
over without its first ones; the seek that follows reads the first ones
again, and patch 12's once-only check takes them for handed over (they are
below the last one handed) and skips them for good. Seen on the local
broker, with the hand-overs logged: a worker given back a state partition
folded the tenure's second lease (offset 29) as its start; the fetch that
brought 26 to 29 came back 37 ms after "Done reading from changelog topics"
paused the last active partition, 26 and 27 were never handed over, and
after the seek both were skipped as below 29 (1 run of the group-change test
in 27 beside the suite's CPU part; with the fix, none in 43). The fix gives
aiokafka a filter that is never "every partition": the active set itself,
seen through a view that is true even when empty, so with no partition
active no record is returned, and a partition resumed while the fetcher
waits is seen the next time aiokafka looks (when any records arrive, as
before the patch).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Iterable, Mapping
from importlib import metadata
from typing import Any, TypeVar

import faust
from aiokafka import AIOKafkaProducer
from aiokafka.errors import IllegalOperation, KafkaConnectionError, KafkaError
from aiokafka.producer.sender import Sender
from faust.tables import manager as faust_tables_manager
from faust.tables import recovery as faust_recovery
from faust.transport import consumer as faust_consumer
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.transport.producer import ProducerBuffer
from mode.utils.queues import FlowControlEvent, ThrowableQueue

from app.faust_internals import FAUST, MODE

__all__ = ["COORDINATOR_RETRIES", "FAUST_CHANGELOG_QUEUE", "FETCH_BACKOFF", "FETCH_MAX_WAIT_MS",
           "REBALANCED_DURING_RECOVERY", "RECOVERY_IDLE", "ActiveOnly", "CoordinatorRetrySender",
           "RecoveryQueue", "SendsUnderWay", "UnflushedWritesError", "WorkerProducer", "apply",
           "no_fetch_backoff", "short_long_poll"]

log = logging.getLogger("app.faust_patches")

_APPLIED = "_krabka_patched"
FLUSH_SECONDS = 5.0
"""The longest a commit waits for the producer buffer's table writes to be sent."""


class UnflushedWritesError(RuntimeError):
    """A commit's flush could not send the producer buffer's table writes in time:
    the commit fails rather than commit offsets ahead of their writes."""

    def __init__(self, buffered: int, sending: int) -> None:
        super().__init__(f"{buffered} table writes still buffered and {sending} being sent "
                         f"after {FLUSH_SECONDS:g} s: the commit fails rather than commit "
                         "offsets ahead of them")
        self.buffered = buffered
        self.sending = sending


async def _highwaters(self: Any, partitions: Iterable[Any]) -> Mapping[Any, int]:
    consumer = self._ensure_consumer()
    offsets: Mapping[Any, int] = await consumer.end_offsets(list(partitions))
    return offsets


async def _commit_transactions(self: Any, tid_to_offset_map: Mapping[str, Any], group_id: str,
                               start_new_transaction: bool = True) -> None:
    await _flush_buffer(self.buffer)
    # Each partition's transaction has its own producer, coordinator connection
    # and lock, so they commit side by side (patch 6): one after the other, a
    # commit of 16 partitions took 16 times three round trips, and an event of
    # the last partition waited for all of them.
    results = await asyncio.gather(
        *(_commit_one(self, transactional_id, offsets, group_id, start_new_transaction)
          for transactional_id, offsets in tid_to_offset_map.items()),
        return_exceptions=True)
    # Every commit has ended before the first failure is raised, so none is
    # left running behind a crash (ProducerFenced is what Faust's caller catches).
    for result in results:
        if isinstance(result, BaseException):
            raise result


async def _commit_one(producer_service: Any, transactional_id: str, offsets: Mapping[Any, int],
                      group_id: str, start_new_transaction: bool) -> None:
    async with producer_service._trn_locks[transactional_id]:
        producer = producer_service._transaction_producers.get(transactional_id)
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


_State = TypeVar("_State")


def _attached(owner: Any, name: str, make: Callable[[], _State]) -> _State:
    """The state a patch keeps on one of Faust's objects under `name`, made on first use."""
    state: _State | None = owner.__dict__.get(name)
    if state is None:
        state = make()
        setattr(owner, name, state)
    return state


class SendsUnderWay:
    """The table writes a producer buffer has taken from its queue and not yet sent.

    Faust's buffer counts only what waits in its queue (``ProducerBuffer.size``):
    its sending task takes a write off the queue, then awaits the send, and in
    between the write is in neither count nor transaction. A commit that
    flushed on ``size`` alone could commit the offset of an event whose write
    was that one (patch 2).
    """

    def __init__(self) -> None:
        self.count = 0
        """Writes taken off the queue and not yet sent."""
        self.waiting = 0
        """Flushes waiting for them (`idle`)."""
        self._idle = asyncio.Event()
        self._idle.set()

    def started(self) -> None:
        self.count += 1
        self._idle.clear()

    def ended(self) -> None:
        self.count -= 1
        if not self.count:
            self._idle.set()

    async def idle(self) -> None:
        """Wait until no write is under way."""
        self.waiting += 1
        try:
            await self._idle.wait()
        finally:
            self.waiting -= 1

    @staticmethod
    def of(buffer: Any) -> SendsUnderWay:
        return _attached(buffer, _UNDER_WAY, SendsUnderWay)


_UNDER_WAY = "_krabka_sends_under_way"


async def _flush_buffer(buffer: Any) -> None:
    """Send every buffered message into the transactions still open, and wait for
    the sends already under way (`SendsUnderWay`).

    ``ProducerBuffer.flush`` gives up after 0.1 s without a send, so it is
    repeated while messages remain, for at most `FLUSH_SECONDS`; a buffer
    that is not running sends nothing (Faust's own flush would raise).
    Every caller commits offsets next, and an offset committed ahead of its
    event's table write loses the write if the worker dies before the next
    commit: so writes still buffered or being sent at the deadline raise
    `UnflushedWritesError`, and the commit fails instead.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + FLUSH_SECONDS
    under_way = SendsUnderWay.of(buffer)
    while (buffer.size or under_way.count) and buffer.state == "running":
        left = deadline - loop.time()
        if left <= 0:
            raise UnflushedWritesError(buffer.size, under_way.count)
        if buffer.size:
            await buffer.flush()
        else:
            try:
                await asyncio.wait_for(under_way.idle(), left)
            except TimeoutError:
                continue  # the deadline's error, above


_original_flush = faust_aiokafka.Producer.flush


async def _flush(self: Any) -> None:
    """``Producer.flush`` that sends every buffered table write first (patch 2b)."""
    await _flush_buffer(self.buffer)
    await _original_flush(self)


_original_send_pending = ProducerBuffer._send_pending


async def _send_pending(self: Any, fut: Any) -> None:
    """``ProducerBuffer._send_pending`` that counts the send as under way (2) and
    drops a write whose transaction has ended (2c)."""
    under_way = SendsUnderWay.of(self)
    under_way.started()
    try:
        await fut.message.channel.publish_message(fut, wait=False)
    except IllegalOperation as exc:
        # aiokafka's send raises it only for a transactional producer that is
        # not in a transaction: the one the consumer's final commit ended.
        log.info("a table write made after its partition's transaction ended is dropped; "
                 "the event that made it was not committed and is folded again (%s)", exc)
        fut.cancel()
    finally:
        under_way.ended()


FETCH_BACKOFF = 0.0
"""Seconds aiokafka's fetcher holds back a broker's fetch while a partition of it has
records the consumer has not taken (aiokafka's own: 0.1; patch 7)."""

FETCH_MAX_WAIT_MS = 100
"""Milliseconds a fetch of the consumer thread waits for records (Faust's: 1 500; patch 9)."""

_original_consumer_thread_on_start = faust_aiokafka.AIOKafkaConsumerThread.on_start


async def _consumer_thread_on_start(self: Any) -> None:
    """``AIOKafkaConsumerThread.on_start``, then the consumer's fetch backoff (patch 7)
    and long poll (patch 9)."""
    await _original_consumer_thread_on_start(self)
    no_fetch_backoff(self._consumer)
    short_long_poll(self._consumer)


def no_fetch_backoff(consumer: Any) -> None:
    """Let a started aiokafka consumer fetch a broker's other partitions while one of
    them still holds records (`FETCH_BACKOFF`); the fetcher reads the value at each
    fetch, and exists only once the consumer has started."""
    consumer._fetcher._prefetch_backoff = FETCH_BACKOFF


def short_long_poll(consumer: Any) -> None:
    """Let a started aiokafka consumer's fetches wait `FETCH_MAX_WAIT_MS` for records,
    so the requests behind them on the connection wait no longer (patch 9)."""
    consumer._fetcher._fetch_max_wait_ms = FETCH_MAX_WAIT_MS


class ActiveOnly:
    """The consumer's active partitions as aiokafka's ``Fetcher.fetched_records``
    filters by them (patch 14).

    A live view of Faust's set, so a partition resumed while the fetcher waits
    for records is seen the next time it looks (when any records arrive), and
    true even when the set is empty, where aiokafka would read an empty filter
    as every partition. The consumer thread reads it while the main loop
    changes the set, as it read the set."""

    __slots__ = ("_active",)

    def __init__(self, active: Any) -> None:
        self._active = active

    def __bool__(self) -> bool:
        return True

    def __contains__(self, tp: object) -> bool:
        return tp in self._active


_original_fetch_records = faust_aiokafka.AIOKafkaConsumerThread._fetch_records


async def _fetch_records(self: Any, consumer: Any, active_partitions: Any,
                         timeout: float | None = None,  # noqa: ASYNC109
                         max_records: int | None = None) -> Any:
    """``AIOKafkaConsumerThread._fetch_records`` (same signature), which asks aiokafka
    for the active partitions' records only, none when none is active (patch 14)."""
    # Faust types the filter as a set; aiokafka only tests it for truth and membership.
    partitions: Any = None if active_partitions is None else ActiveOnly(active_partitions)
    return await _original_fetch_records(self, consumer, partitions, timeout=timeout,
                                         max_records=max_records)


COORDINATOR_RETRIES = 10
"""How many times a worker's Faust producer looks its coordinator up again after
the connection was lost during the lookup, before the error propagates (patch 8)."""


class CoordinatorRetrySender(Sender):
    """aiokafka's ``Sender``, whose coordinator lookup is retried after a connection
    lost during it, at most `COORDINATOR_RETRIES` times (patch 8)."""

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


class WorkerProducer(AIOKafkaProducer):
    """The aiokafka producer Faust's aiokafka ``Producer`` builds in the worker: its
    sender is a `CoordinatorRetrySender` (patch 8).

    aiokafka builds the sender in ``AIOKafkaProducer.__init__`` by its module's
    name for ``Sender``, so the built one is made the subclass, which adds
    behaviour only, no state."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._sender.__class__ = CoordinatorRetrySender


def _producer_type(self: Any) -> type[AIOKafkaProducer]:
    """``Producer._producer_type``: the client class Faust's producer builds (patch 8)."""
    return WorkerProducer


_original_on_rebalance = faust_consumer.TransactionManager.on_rebalance


async def _on_rebalance(self: Any, assigned: set[Any], revoked: set[Any],
                        newly_assigned: set[Any]) -> None:
    """``TransactionManager.on_rebalance`` that first stops the producers of the
    partitions this worker no longer has active (patch 11)."""
    active = self._tps_to_transactional_ids(assigned)
    producer = self.producer
    for transactional_id in sorted(set(producer._transaction_producers) - active):
        log.info("stopping the transactional producer %s: its partition is no longer "
                 "active here", transactional_id)
        await producer.stop_transaction(transactional_id)
    await _original_on_rebalance(self, assigned, revoked, newly_assigned)


_original_table_manager_on_start = faust_tables_manager.TableManager.on_start


async def _table_manager_on_start(self: Any) -> None:
    """``TableManager.on_start`` without its first second's sleep (patch 10)."""
    if not self.should_stop:
        await self._update_channels()
        await self.recovery.start()


_original_recovery_wait = faust_recovery.Recovery._wait

REBALANCED_DURING_RECOVERY = ("a rebalance started during table recovery: "
                              "recovery restarts for the new assignment")


async def _recovery_wait(self: Any, coro: Any, timeout: Any = None) -> None:  # noqa: ASYNC109
    """``Recovery._wait`` (same signature), which also raises ``RebalanceAgain`` for a rebalance
    that started *before* the call (one an earlier, swallowed wait saw)."""
    if self.signal_recovery_start.is_set():
        if inspect.iscoroutine(coro):
            coro.close()  # never started: no "was never awaited" warning
        elif isinstance(coro, asyncio.Future):
            coro.cancel()
        log.info(REBALANCED_DURING_RECOVERY)
        raise faust_recovery.RebalanceAgain()
    await _original_recovery_wait(self, coro, timeout)


RECOVERY_IDLE = 0.25
"""Seconds the table recovery waits on an empty changelog queue before it counts
an idle poll (Faust's own wait: 5 s; two idle polls end a transactional recovery)."""


class RecoveryQueue(ThrowableQueue[Any]):
    """The tables' changelog queue, whose ``get`` gives up after `RECOVERY_IDLE`
    seconds without an event (patch 4). Only the table recovery reads it."""

    async def get(self) -> Any:
        if not self.empty():  # no task for the wait while events are queued
            return await super().get()
        return await asyncio.wait_for(super().get(), RECOVERY_IDLE)


FAUST_CHANGELOG_QUEUE = faust_tables_manager.TableManager.changelog_queue
"""Faust's own ``TableManager.changelog_queue``, which patch 4 replaces (a test's
workers put it back to keep Faust's ten-second recovery)."""


def _changelog_queue(self: Any) -> Any:
    """``TableManager.changelog_queue``, built as a `RecoveryQueue` (Faust's
    ``App.FlowControlQueue`` builds the same queue, of the base class)."""
    if self._changelog_queue is None:
        self._changelog_queue = RecoveryQueue(
            maxsize=self.app.conf.stream_buffer_maxsize, flow_control=self.app.flow_control,
            clear_on_resume=True)
    return self._changelog_queue


_original_wait_next_records = faust_consumer.Consumer._wait_next_records
_original_position = faust_consumer.ThreadDelegateConsumer.position
_IN_FLIGHT = "_krabka_in_flight"


class InFlight:
    """The changelog records the consumer has taken from aiokafka and the table
    recovery may not have applied yet (patch 5)."""

    def __init__(self) -> None:
        self.held = False
        """Whether the fetcher holds a batch it has not handed on to the queues."""
        self.first: dict[Any, int] = {}
        """Per partition, the first offset of the batches since nothing was in flight."""

    def settled(self, consumer: Any) -> bool:
        """Whether every record taken so far is applied: no batch held, none queued.

        The recovery updates its offsets as it takes each event off the queue."""
        settled = not self.held and consumer.app.tables.changelog_queue.empty()
        if settled:
            self.first.clear()
        return settled

    @staticmethod
    def of(consumer: Any) -> InFlight:
        return _attached(consumer, _IN_FLIGHT, InFlight)


async def _wait_next_records(self: Any, timeout: float) -> Any:  # noqa: ASYNC109
    """``Consumer._wait_next_records`` that notes each batch as in flight.

    The fetcher asks for the next batch only after it has put every record of
    the last one through the conductor into the channels' queues."""
    in_flight = InFlight.of(self)
    in_flight.held = False
    in_flight.settled(self)
    records, active_partitions = await _original_wait_next_records(self, timeout)
    if records:
        # In the same step as the records' arrival, so a position the consumer
        # thread answered after handing them over finds them noted.
        in_flight.held = True
        for tp, batch in records.items():
            if batch:
                in_flight.first.setdefault(tp, batch[0].offset)
    return records, active_partitions


_original_build_highwaters = faust_recovery.Recovery._build_highwaters
_original_seek_offsets = faust_recovery.Recovery._seek_offsets
_UNSOUGHT = "_krabka_unsought"


def _unsought(recovery: Any) -> set[Any]:
    """The active changelog partitions of the recovery under way that it has not
    yet sought to the offsets it reads them from (patch 13)."""
    return _attached(recovery, _UNSOUGHT, set)


async def _build_highwaters(self: Any, consumer: Any, tps: set[Any], destination: Any,
                            title: str) -> None:
    """``Recovery._build_highwaters``; for the active partitions, a recovery's first
    step, after which their positions are not its own until it seeks them (patch 13)."""
    if title == "active":
        unsought = _unsought(self)
        unsought.clear()
        unsought.update(tps)
    await _original_build_highwaters(self, consumer, tps, destination, title)


async def _seek_offsets(self: Any, consumer: Any, tps: set[Any], offsets: Any,
                        title: str) -> None:
    """``Recovery._seek_offsets``: from here the partitions' positions are the recovery's (13)."""
    await _original_seek_offsets(self, consumer, tps, offsets, title)
    _unsought(self).difference_update(tps)


async def _position(self: Any, tp: Any) -> int | None:
    """``ThreadDelegateConsumer.position``, but never past a record not yet applied.

    Only the table recovery asks (its ``detect_aborted_tx``), from the loop
    that empties the changelog queue, so it must not wait for the queue: while
    the fetcher holds a batch or the queue holds events, the answer for a
    partition with records among them is the first such offset (patch 5). And
    before the recovery has sought a partition, the answer is the offset it
    will read the partition from, not where an earlier fetch left the
    consumer (patch 13)."""
    recovery = self.app.tables.recovery
    if tp in _unsought(recovery):
        start: int = recovery.active_offsets.get(tp, -1)
        return start
    position: int | None = await _original_position(self, tp)
    in_flight = InFlight.of(self)
    if in_flight.settled(self):
        return position
    first = in_flight.first.get(tp)
    if first is not None and position is not None and position > first:
        return first
    return position


_original_flow_resume = FlowControlEvent.resume
_original_flow_clear = FlowControlEvent.clear
_original_drain_messages = faust_consumer.Consumer._drain_messages
_original_seek = faust_consumer.Consumer.seek
_HANDED = "_krabka_handed"


class Handed:
    """The last offset of each stream partition the consumer has handed to the
    streams since the flow control last emptied their queues (patch 12)."""

    def __init__(self) -> None:
        self.last: dict[Any, int] = {}
        self.emptied = 0
        """How many times the queues were emptied: a hand-over that spans one is forgotten."""

    def emptied_now(self) -> None:
        """The queues were emptied: every partition's records are handed over again."""
        self.last.clear()
        self.emptied += 1

    def forget(self, tp: Any) -> None:
        """`tp` is read again from a new offset: its records are handed over again."""
        self.last.pop(tp, None)

    @staticmethod
    def of(flow_control: Any) -> Handed:
        return _attached(flow_control, _HANDED, Handed)


def _flow_resume(self: FlowControlEvent) -> None:
    """``FlowControlEvent.resume`` that empties the queues only when the flow was
    suspended (patch 12): the events queued while it is active are current."""
    if not self.is_active():
        _original_flow_resume(self)


def _flow_clear(self: FlowControlEvent) -> None:
    """``FlowControlEvent.clear`` that forgets what was handed to the emptied queues (patch 12)."""
    _original_flow_clear(self)
    Handed.of(self).emptied_now()


def _handed_once(consumer: Any, callback: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`callback` (the conductor's), which hands each offset of a stream partition
    to the streams once between two emptyings of their queues (patch 12)."""
    handed = Handed.of(consumer.app.flow_control)
    # Faust's test builds a set of every changelog topic per call; on this
    # per-record path it is asked once per topic instead (a worker's tables are
    # fixed once it runs: Faust refuses a table made later).
    changelog: dict[str, bool] = {}

    async def hand_over(message: Any) -> None:
        tp = message.tp
        is_changelog = changelog.get(tp.topic)
        if is_changelog is None:
            is_changelog = changelog[tp.topic] = consumer._is_changelog_tp(tp)
        if is_changelog:  # the table recovery seeks and reads changelogs again
            await callback(message)
            return
        last = handed.last.get(tp)
        if last is not None and message.offset <= last:
            return  # fetched again after a seek: its event is queued or handled
        emptied = handed.emptied
        await callback(message)
        if handed.emptied == emptied:
            handed.last[tp] = message.offset

    setattr(hand_over, _HANDED, True)
    return hand_over


async def _drain_messages(self: Any, fetcher: Any) -> None:
    """``Consumer._drain_messages`` with its callback handing each record over once (patch 12)."""
    if not getattr(self.callback, _HANDED, False):
        self.callback = _handed_once(self, self.callback)
    await _original_drain_messages(self, fetcher)


async def _seek(self: Any, partition: Any, offset: int) -> None:
    """``Consumer.seek``: a partition sought is read again from `offset` (patch 12)."""
    Handed.of(self.app.flow_control).forget(partition)
    await _original_seek(self, partition, offset)


def apply() -> None:
    """Patch Faust's aiokafka driver and, on a tested version, its table recovery (idempotent)."""
    thread = faust_aiokafka.AIOKafkaConsumerThread
    if getattr(thread, _APPLIED, False):
        return
    thread._highwaters = _highwaters  # type: ignore[method-assign]
    faust_aiokafka.Producer.commit_transactions = _commit_transactions  # type: ignore[method-assign]
    faust_aiokafka.Producer.flush = _flush  # type: ignore[method-assign]
    ProducerBuffer._send_pending = _send_pending  # type: ignore[method-assign]
    faust_consumer.TransactionManager.on_rebalance = _on_rebalance  # type: ignore[method-assign]
    thread.on_start = _consumer_thread_on_start  # type: ignore[method-assign]
    thread._fetch_records = _fetch_records  # type: ignore[method-assign]
    faust_aiokafka.Producer._producer_type = property(_producer_type)  # type: ignore[method-assign,assignment]
    _patch_recovery(faust.__version__, metadata.version(MODE.distribution))
    setattr(thread, _APPLIED, True)


def _patch_recovery(version: str, mode_version: str) -> bool:
    """Install the recovery fix if `version` (faust-streaming's) and `mode_version`
    (mode-streaming's) are the ones it was checked on."""
    if not (FAUST.covers(version) and MODE.covers(mode_version)):
        log.warning("faust-streaming %s with mode-streaming %s: the recovery patches are for "
                    "%s with %s only and are not installed; check whether "
                    "Recovery._restart_recovery still swallows RebalanceAgain, "
                    "_slurp_changelogs still waits two 5 s polls and ends a partition at the "
                    "consumer's position, and FlowControlEvent.resume still empties the "
                    "queues of an active flow (docs/upstream-faust.md)",
                    version, mode_version, FAUST.requirement, MODE.requirement)
        return False
    faust_recovery.Recovery._wait = _recovery_wait  # type: ignore[method-assign]
    faust_tables_manager.TableManager.on_start = _table_manager_on_start  # type: ignore[method-assign]
    faust_tables_manager.TableManager.changelog_queue = property(  # type: ignore[method-assign,assignment]
        _changelog_queue)
    faust_consumer.Consumer._wait_next_records = _wait_next_records  # type: ignore[method-assign]
    faust_consumer.ThreadDelegateConsumer.position = _position  # type: ignore[method-assign]
    FlowControlEvent.resume = _flow_resume  # type: ignore[method-assign]
    FlowControlEvent.clear = _flow_clear  # type: ignore[method-assign]
    faust_consumer.Consumer._drain_messages = _drain_messages  # type: ignore[method-assign]
    faust_consumer.Consumer.seek = _seek  # type: ignore[method-assign]
    faust_recovery.Recovery._build_highwaters = _build_highwaters  # type: ignore[method-assign]
    faust_recovery.Recovery._seek_offsets = _seek_offsets  # type: ignore[method-assign]
    return True

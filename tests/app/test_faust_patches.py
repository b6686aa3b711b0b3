"""The faust-streaming patches of `app.faust_patches`: what they change, and
that every private name they rely on is still there (a Faust or aiokafka
upgrade that renames one must fail here, not in production)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import subprocess
import sys
import types
from pathlib import Path

import faust
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.client import CoordinationType
from aiokafka.consumer.fetcher import Fetcher, FetchResult
from aiokafka.consumer.subscription_state import SubscriptionState
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    IllegalOperation,
    KafkaConnectionError,
    KafkaError,
)
from aiokafka.producer.sender import Sender
from aiokafka.protocol.fetch import FetchRequest_v4
from faust.tables import manager as faust_tables_manager
from faust.tables import recovery as faust_recovery
from faust.transport import consumer as faust_consumer
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.transport.producer import ProducerBuffer
from mode.utils.queues import FlowControlEvent, FlowControlQueue

from app import faust_patches
from app.faust_internals import FAUST, MODE

RebalanceAgain = faust_recovery.RebalanceAgain
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def recovery():
    """Faust's own table-recovery service of an app that is never started."""
    app = faust.App("patch-test", broker="kafka://127.0.0.1:1", store="memory://")
    return app.tables.recovery


class Step:
    """A recovery step (the coroutine `_wait` is given) that records whether it ran."""

    def __init__(self, error: Exception | None = None) -> None:
        self.ran = False
        self.error = error

    async def __call__(self) -> str:
        self.ran = True
        if self.error is not None:
            raise self.error
        return "done"


# --- the recovery patch --------------------------------------------------------------


async def test_a_step_of_a_superseded_recovery_is_never_started(recovery):
    recovery.signal_recovery_start.set()  # a newer rebalance is pending
    step = Step()
    coro = step()
    with pytest.raises(RebalanceAgain):
        await faust_patches._recovery_wait(recovery, coro)
    assert not step.ran
    assert coro.cr_frame is None  # closed: no "coroutine was never awaited" warning


async def test_unpatched_faust_runs_it_and_its_error_wins_over_the_rebalance(recovery):
    """The crash, in miniature: with a rebalance already pending, Faust's own
    ``_wait`` still starts the step, and a seek that fails at once (offset
    None) raises its ValueError instead of RebalanceAgain."""
    recovery.signal_recovery_start.set()
    seek = Step(ValueError("Offset must be a positive integer"))
    with pytest.raises(ValueError, match="positive integer"):
        await faust_patches._original_recovery_wait(recovery, seek())
    assert seek.ran
    patched = Step(ValueError("Offset must be a positive integer"))
    with pytest.raises(RebalanceAgain):
        await faust_patches._recovery_wait(recovery, patched())
    assert not patched.ran


async def test_without_a_pending_rebalance_the_step_runs_as_before(recovery):
    step = Step()
    await faust_patches._recovery_wait(recovery, step())
    assert step.ran
    failing = Step(ValueError("a real error"))
    with pytest.raises(ValueError, match="a real error"):
        await faust_patches._recovery_wait(recovery, failing())


async def test_a_rebalance_during_the_step_still_raises_rebalance_again(recovery):
    release = asyncio.Event()

    async def slow_step() -> None:
        await release.wait()

    async def rebalance_soon() -> None:
        await asyncio.sleep(0)
        recovery.signal_recovery_start.set()

    rebalance = asyncio.create_task(rebalance_soon())
    with pytest.raises(RebalanceAgain):
        await faust_patches._recovery_wait(recovery, slow_step())
    await rebalance


def test_the_recovery_patches_are_installed_only_on_a_tested_version(monkeypatch):
    original = faust_patches._original_recovery_wait
    original_queue = faust_patches.FAUST_CHANGELOG_QUEUE
    monkeypatch.setattr(faust_recovery.Recovery, "_wait", original)
    monkeypatch.setattr(faust_tables_manager.TableManager, "changelog_queue", original_queue)
    monkeypatch.setattr(faust_consumer.Consumer, "_wait_next_records",
                        faust_patches._original_wait_next_records)
    monkeypatch.setattr(faust_consumer.ThreadDelegateConsumer, "position",
                        faust_patches._original_position)
    monkeypatch.setattr(faust_tables_manager.TableManager, "on_start",
                        faust_patches._original_table_manager_on_start)
    assert not FAUST.covers("0.99.0")
    assert not MODE.covers("0.99.0")
    assert not faust_patches._patch_recovery("0.99.0", "0.7.1")
    assert not faust_patches._patch_recovery("0.15.3", "0.99.0")
    assert faust_recovery.Recovery._wait is original
    assert (faust_tables_manager.TableManager.on_start
            is faust_patches._original_table_manager_on_start)
    assert faust_tables_manager.TableManager.changelog_queue is original_queue
    assert faust_consumer.ThreadDelegateConsumer.position is faust_patches._original_position
    assert faust_patches._patch_recovery("0.15.3", "0.7.1")
    assert faust_recovery.Recovery._wait is faust_patches._recovery_wait
    assert faust_tables_manager.TableManager.changelog_queue.fget is faust_patches._changelog_queue
    assert faust_consumer.Consumer._wait_next_records is faust_patches._wait_next_records
    assert faust_consumer.ThreadDelegateConsumer.position is faust_patches._position
    assert faust_tables_manager.TableManager.on_start is faust_patches._table_manager_on_start


# --- the recovery's end found without ten idle seconds ---------------------------------


def test_the_tables_changelog_queue_is_the_recovery_queue():
    faust_patches.apply()
    app = faust.App("patch-test-queue", broker="kafka://127.0.0.1:1", store="memory://")
    queue = app.tables.changelog_queue
    assert isinstance(queue, faust_patches.RecoveryQueue)
    assert queue is app.tables.changelog_queue  # one queue, as Faust's property keeps
    assert queue.maxsize == app.conf.stream_buffer_maxsize


async def test_an_empty_changelog_queue_gives_up_after_the_idle_time_with_timeout_error():
    app = faust.App("patch-test-idle", broker="kafka://127.0.0.1:1", store="memory://")
    queue = faust_patches.RecoveryQueue(flow_control=app.flow_control)
    loop = asyncio.get_running_loop()
    started = loop.time()
    # The TimeoutError the recovery loop's own ``wait_for(..., timeout=5.0)`` raises
    # when idle: the loop counts it as an idle poll.
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(queue.get(), timeout=5.0)
    assert loop.time() - started < 5.0
    queue.put_nowait("event")
    assert await queue.get() == "event"


def test_the_recovery_loop_still_ends_a_transactional_recovery_after_two_idle_polls():
    """What the short idle time relies on: the loop counts a TimeoutError of its
    queue wait as an idle poll, and after two it runs ``detect_aborted_tx``."""
    source = inspect.getsource(faust_recovery.Recovery._slurp_changelogs.fun)
    assert "changelog_queue = self.tables.changelog_queue" in source
    assert "except asyncio.TimeoutError:" in source
    assert "timeout_count > 1" in source
    assert "await detect_aborted_tx()" in source


# --- a partition recovered only once the records before its position are applied -------


class Record:
    def __init__(self, offset: int) -> None:
        self.offset = offset


class Consumer:
    """What the position patch uses of Faust's consumer: the app's changelog queue."""

    def __init__(self) -> None:
        app = faust.App("patch-test-position", broker="kafka://127.0.0.1:1",
                        store="memory://")
        self.app = app


@pytest.fixture
def consumer(monkeypatch):
    """A consumer whose thread says every partition is at offset 100, and whose next
    batch is what the test puts in `consumer.batch`."""
    consumer = Consumer()
    consumer.batch = {}

    async def position(self, tp):
        return 100

    async def wait_next_records(self, timeout):  # noqa: ASYNC109 (Faust's signature)
        batch, self.batch = self.batch, {}
        return batch, set(batch)
    monkeypatch.setattr(faust_patches, "_original_position", position)
    monkeypatch.setattr(faust_patches, "_original_wait_next_records", wait_next_records)
    return consumer


async def test_a_position_is_not_past_the_first_record_of_a_batch_the_fetcher_still_holds(
        consumer):
    consumer.batch = {"tp-a": [Record(40), Record(41)]}
    await faust_patches._wait_next_records(consumer, 1.0)
    assert await faust_patches._position(consumer, "tp-a") == 40
    assert await faust_patches._position(consumer, "tp-b") == 100  # not in the batch


async def test_a_handed_on_batch_still_in_the_changelog_queue_holds_the_position_back(consumer):
    consumer.batch = {"tp-a": [Record(40)]}
    await faust_patches._wait_next_records(consumer, 1.0)
    queue = consumer.app.tables.changelog_queue
    queue.put_nowait("the batch's event, not yet taken by the recovery")
    await faust_patches._wait_next_records(consumer, 1.0)  # the fetcher asks for the next
    assert await faust_patches._position(consumer, "tp-a") == 40
    queue.get_nowait()
    assert await faust_patches._position(consumer, "tp-a") == 100


async def test_once_nothing_is_in_flight_the_position_is_the_consumer_s_from_then_on(consumer):
    consumer.batch = {"tp-a": [Record(40)]}
    await faust_patches._wait_next_records(consumer, 1.0)
    await faust_patches._wait_next_records(consumer, 1.0)
    assert await faust_patches._position(consumer, "tp-a") == 100
    consumer.batch = {"tp-b": [Record(7)]}  # a later batch holds back only its partitions
    await faust_patches._wait_next_records(consumer, 1.0)
    assert await faust_patches._position(consumer, "tp-a") == 100
    assert await faust_patches._position(consumer, "tp-b") == 7


def test_the_recovery_still_ends_a_partition_at_the_main_loop_consumer_s_position():
    """What the position patch relies on: the recovery asks the app's consumer (the
    main loop's, which the patch wraps), the fetcher asks it for each batch, and the
    position goes through the consumer thread."""
    slurp = inspect.getsource(faust_recovery.Recovery._slurp_changelogs.fun)
    assert "await self.app.consumer.position(tp)" in slurp
    assert "offsets[tp] = highwater" in slurp
    getmany = inspect.getsource(faust_consumer.Consumer.getmany)
    assert "await self._wait_next_records(timeout)" in getmany
    assert _parameters(faust_patches._original_wait_next_records) == ["self", "timeout"]
    position = inspect.getsource(faust_patches._original_position)
    assert "self._thread.position(tp)" in position
    assert issubclass(faust_aiokafka.Consumer, faust_consumer.ThreadDelegateConsumer)


def test_the_installed_faust_is_patched():
    assert FAUST.covers(faust.__version__)
    faust_patches.apply()
    assert faust_recovery.Recovery._wait is faust_patches._recovery_wait
    assert faust_tables_manager.TableManager.changelog_queue.fget is faust_patches._changelog_queue
    assert faust_aiokafka.AIOKafkaConsumerThread._highwaters is faust_patches._highwaters
    assert faust_aiokafka.Producer.commit_transactions is faust_patches._commit_transactions
    assert faust_aiokafka.Producer.flush is faust_patches._flush
    assert ProducerBuffer._send_pending is faust_patches._send_pending
    assert faust_consumer.Consumer._wait_next_records is faust_patches._wait_next_records
    assert faust_consumer.ThreadDelegateConsumer.position is faust_patches._position
    assert faust_aiokafka.AIOKafkaConsumerThread.on_start is faust_patches._consumer_thread_on_start
    assert faust_aiokafka.AIOKafkaConsumerThread._fetch_records is faust_patches._fetch_records
    assert faust_aiokafka.Producer._producer_type.fget is faust_patches._producer_type
    assert FlowControlEvent.resume is faust_patches._flow_resume
    assert FlowControlEvent.clear is faust_patches._flow_clear
    assert faust_consumer.Consumer._drain_messages is faust_patches._drain_messages
    assert faust_consumer.Consumer.seek is faust_patches._seek
    assert faust_recovery.Recovery._build_highwaters is faust_patches._build_highwaters
    assert faust_recovery.Recovery._seek_offsets is faust_patches._seek_offsets


# --- commits carry the table writes of the events whose offsets they commit ---------


class _Log(list):
    """What happened, in order."""


class _Channel:
    def __init__(self, log: _Log) -> None:
        self.log = log

    async def publish_message(self, fut: object, wait: bool = False) -> None:
        self.log.append("send table write")


class _TransactionProducer:
    def __init__(self, log: _Log) -> None:
        self.log = log
        self.in_transaction = True
        self._txn_manager = types.SimpleNamespace(is_in_transaction=lambda: self.in_transaction)

    async def send_offsets_to_transaction(self, offsets: object, group_id: str) -> None:
        self.log.append("send offsets")

    async def commit_transaction(self) -> None:
        self.log.append("commit")
        self.in_transaction = False

    async def begin_transaction(self) -> None:
        self.in_transaction = True


def _buffer() -> ProducerBuffer:
    buffer = ProducerBuffer()
    buffer.app = types.SimpleNamespace(conf=types.SimpleNamespace(producer_threaded=False))
    return buffer


def _transactional(log: _Log) -> tuple[ProducerBuffer, types.SimpleNamespace]:
    """A producer buffer, and a Faust producer of one transaction ("tid") around it."""
    buffer = _buffer()
    return buffer, types.SimpleNamespace(
        buffer=buffer, _trn_locks={"tid": asyncio.Lock()},
        _transaction_producers={"tid": _TransactionProducer(log)})


@pytest.mark.parametrize("start_new_transaction", [True, False])
async def test_a_commit_first_sends_the_table_writes_waiting_in_the_producer_buffer(
    start_new_transaction,
):
    """With the final commit at shutdown (no new transaction) a write left in
    the buffer had no transaction to go to, and the worker crashed."""
    log = _Log()
    buffer, producer = _transactional(log)
    await buffer.start()
    try:
        for _ in range(3):  # an event's table writes, buffered; the event is acked
            buffer.put(types.SimpleNamespace(message=types.SimpleNamespace(channel=_Channel(log))))
        await faust_patches._commit_transactions(producer, {"tid": {}}, "group",
                                                 start_new_transaction)
    finally:
        await buffer.stop()
    assert log == ["send table write"] * 3 + ["send offsets", "commit"]


class _GatedChannel(_Channel):
    """A send that, once the buffer's task has taken its write off the queue,
    waits for `gate` before the write reaches the transaction."""

    def __init__(self, log: _Log, gate: asyncio.Event) -> None:
        super().__init__(log)
        self.gate = gate

    async def publish_message(self, fut: object, wait: bool = False) -> None:
        self.log.append("take table write")
        await self.gate.wait()
        await super().publish_message(fut, wait)


@pytest.mark.parametrize("start_new_transaction", [True, False])
async def test_a_commit_waits_for_the_table_write_the_buffer_is_sending(start_new_transaction):
    """Faust's buffer counts only the writes still in its queue: one its task had
    taken off and was sending was in no count, the commit sent the offsets of
    its event and ended the transaction first, and the write landed in the
    next transaction, or after the final commit in none."""
    faust_patches.apply()
    log = _Log()
    gate = asyncio.Event()
    buffer, producer = _transactional(log)
    await buffer.start()
    try:
        buffer.put(types.SimpleNamespace(
            message=types.SimpleNamespace(channel=_GatedChannel(log, gate))))
        await _until(lambda: log == ["take table write"], within=5)
        assert buffer.size == 0  # out of the queue, not yet in the transaction
        commit = asyncio.ensure_future(faust_patches._commit_transactions(
            producer, {"tid": {}}, "group", start_new_transaction))
        under_way = faust_patches.SendsUnderWay.of(buffer)
        await _until(lambda: commit.done() or under_way.waiting, within=5)
        gate.set()
        await asyncio.wait_for(commit, 5)
    finally:
        gate.set()
        await buffer.stop()
    assert log == ["take table write", "send table write", "send offsets", "commit"]


@pytest.mark.parametrize("writes_queued", [0, 2])
async def test_a_commit_whose_table_writes_cannot_be_sent_in_time_fails_without_its_offsets(
    monkeypatch, writes_queued,
):
    """A commit that went ahead of a write it could not send committed the offset of
    the write's event: a crash before the next commit lost the write for good."""
    faust_patches.apply()
    monkeypatch.setattr(faust_patches, "FLUSH_SECONDS", 0.2)
    log = _Log()
    gate = asyncio.Event()  # the send under way never ends while the commit waits
    buffer, producer = _transactional(log)
    await buffer.start()
    try:
        for _ in range(1 + writes_queued):
            buffer.put(types.SimpleNamespace(
                message=types.SimpleNamespace(channel=_GatedChannel(log, gate))))
        await _until(lambda: "take table write" in log, within=5)
        with pytest.raises(faust_patches.UnflushedWritesError) as failed:
            await asyncio.wait_for(faust_patches._commit_transactions(
                producer, {"tid": {}}, "group"), 5)
    finally:
        gate.set()
        # Faust's buffer refuses to stop with writes in its queue.
        await _until(lambda: log.count("send table write") == 1 + writes_queued, within=5)
        await buffer.stop()
    assert (failed.value.buffered, failed.value.sending) == (writes_queued, 1)
    assert "send offsets" not in log
    assert "commit" not in log


async def test_an_at_least_once_flush_that_cannot_send_the_table_writes_fails_the_commit(
    monkeypatch,
):
    faust_patches.apply()
    monkeypatch.setattr(faust_patches, "FLUSH_SECONDS", 0.2)
    log = _Log()
    gate = asyncio.Event()
    buffer = _buffer()
    client_flushed = []

    async def original_flush(self) -> None:
        client_flushed.append(True)

    monkeypatch.setattr(faust_patches, "_original_flush", original_flush)
    producer = types.SimpleNamespace(buffer=buffer)
    await buffer.start()
    try:
        buffer.put(types.SimpleNamespace(
            message=types.SimpleNamespace(channel=_GatedChannel(log, gate))))
        with pytest.raises(faust_patches.UnflushedWritesError):
            await asyncio.wait_for(faust_patches._flush(producer), 5)
    finally:
        gate.set()
        await buffer.stop()
    # Faust commits the offsets only once the flush has returned.
    assert client_flushed == []


class _OverlappingProducer(_TransactionProducer):
    """A partition's producer whose EndTxn answers only once every partition of
    the commit has sent its own: a commit that ends one transaction before it
    starts the next never gets that far."""

    def __init__(self, log: _Log, all_sent: asyncio.Barrier, error: Exception | None = None):
        super().__init__(log)
        self.all_sent = all_sent
        self.error = error

    async def commit_transaction(self) -> None:
        await self.all_sent.wait()
        if self.error is not None:
            raise self.error
        await super().commit_transaction()


def _committing(producers: dict[str, _TransactionProducer]) -> types.SimpleNamespace:
    buffer = types.SimpleNamespace(size=0, state="running")
    return types.SimpleNamespace(buffer=buffer, _transaction_producers=producers,
                                 _trn_locks={tid: asyncio.Lock() for tid in producers})


async def test_the_partitions_of_a_commit_end_their_transactions_side_by_side():
    log = _Log()
    all_sent = asyncio.Barrier(3)
    producers = {f"tid-{i}": _OverlappingProducer(log, all_sent) for i in range(3)}
    await asyncio.wait_for(faust_patches._commit_transactions(
        _committing(producers), {tid: {} for tid in producers}, "group"), 5)
    assert log == ["send offsets"] * 3 + ["commit"] * 3
    assert all(producer.in_transaction for producer in producers.values())  # begun again


async def test_a_failed_partition_commit_is_raised_once_the_others_have_ended():
    log = _Log()
    all_sent = asyncio.Barrier(2)
    fenced = faust_aiokafka.ProducerFenced()
    producers = {"fenced": _OverlappingProducer(log, all_sent, error=fenced),
                 "fine": _OverlappingProducer(log, all_sent)}
    with pytest.raises(faust_aiokafka.ProducerFenced):
        await asyncio.wait_for(faust_patches._commit_transactions(
            _committing(producers), {tid: {} for tid in producers}, "group"), 5)
    assert log == ["send offsets", "send offsets", "commit"]


class _TransactionalProducers:
    """Faust's producer as its transaction manager sees it: a producer per transactional id."""

    def __init__(self, transactional_ids: list[str]) -> None:
        self._transaction_producers = {tid: object() for tid in transactional_ids}
        self.stopped: list[str] = []

    async def stop_transaction(self, transactional_id: str) -> None:
        self._transaction_producers.pop(transactional_id, None)
        self.stopped.append(transactional_id)


async def test_a_rebalance_stops_the_producers_of_the_partitions_no_longer_active_here(
    monkeypatch,
):
    """Faust stopped only the producers of revoked partitions that did not stay as
    standbys; a partition that went to another worker and came back found its
    old producer, fenced by the other worker's, and the next commit crashed the
    worker with ProducerFenced."""
    seen_by_faust: list[list[str]] = []

    async def faust_own_step(self, assigned, revoked, newly_assigned) -> None:
        seen_by_faust.append(sorted(self.producer._transaction_producers))

    monkeypatch.setattr(faust_patches, "_original_on_rebalance", faust_own_step)
    producer = _TransactionalProducers(["app-0-0", "app-1-0", "app-1-1", "app-1-2"])
    manager = types.SimpleNamespace(
        producer=producer,
        _tps_to_transactional_ids=lambda tps: {f"app-{group}-{p}" for group, p in tps})
    # Partition 1 of group 1 went to another worker (this one keeps its changelog
    # as a standby, so Faust's revoked set does not name its producer).
    await faust_patches._on_rebalance(manager, {(0, 0), (1, 0), (1, 2)}, set(), set())
    assert producer.stopped == ["app-1-1"]
    assert seen_by_faust == [["app-0-0", "app-1-0", "app-1-2"]]


async def _until(condition, within: float) -> None:
    """Wait for `condition()`, yielding to the loop, for at most `within` seconds."""
    deadline = asyncio.get_running_loop().time() + within
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "not within the deadline"
        await asyncio.sleep(0.01)


class _SlowChannel(_Channel):
    """A send that takes longer than the 0.1 s Faust's buffer flush waits for one."""

    async def publish_message(self, fut: object, wait: bool = False) -> None:
        await asyncio.sleep(0.15)  # the buffer is busy sending the one before this
        await super().publish_message(fut, wait)


async def test_an_at_least_once_flush_sends_every_buffered_table_write_before_it_returns():
    """Faust flushes the producer before an at-least-once offset commit; its buffer
    flush gave up after 0.1 s without a send, so the commit could carry offsets
    whose table writes were still buffered, or still being sent."""
    faust_patches.apply()
    log = _Log()
    buffer = _buffer()
    producer = types.SimpleNamespace(buffer=buffer, _producer=None, _transaction_producers={})
    await buffer.start()
    try:
        for _ in range(3):
            buffer.put(types.SimpleNamespace(
                message=types.SimpleNamespace(channel=_SlowChannel(log))))
        await faust_patches._flush(producer)
        log.append("flushed")
    finally:
        await buffer.stop()
    assert log == ["send table write"] * 3 + ["flushed"]


class _EndedChannel(_Channel):
    """A send into a transaction the consumer's final commit has ended, as aiokafka fails it."""

    async def publish_message(self, fut: object, wait: bool = False) -> None:
        raise IllegalOperation("Can't send messages while not in transaction")


def _buffered(channel: _Channel) -> faust.types.FutureMessage:
    return faust.types.FutureMessage(types.SimpleNamespace(channel=channel))  # type: ignore[arg-type]


async def _send_a_late_write_then_another(send_pending: object = None) -> tuple[
        ProducerBuffer, faust.types.FutureMessage, _Log]:
    log = _Log()
    buffer = _buffer()
    if send_pending is not None:
        buffer._send_pending = types.MethodType(send_pending, buffer)  # type: ignore[method-assign]
    await buffer.start()
    try:
        late = _buffered(_EndedChannel(log))
        buffer.put(late)
        buffer.put(_buffered(_Channel(log)))
        await _until(lambda: log == ["send table write"] or buffer.crashed, within=5)
    finally:
        try:
            await buffer.stop()
        except RuntimeError:
            if not buffer.crashed:
                raise  # a crashed buffer cannot flush at its stop ("Producer not Running")
    return buffer, late, log


async def test_a_table_write_made_after_its_transaction_ended_is_dropped_and_the_buffer_goes_on():
    """An agent still processing an event after the final commit wrote the
    table; the buffered send raised and crashed the buffer, and the worker
    stopped with SIGTERM exited 1. The event was not committed, so the write
    is dropped (the partition's next owner folds the event again) and the
    next write is sent."""
    faust_patches.apply()
    buffer, late, log = await _send_a_late_write_then_another()
    assert not buffer.crashed
    assert late.cancelled()
    assert log == ["send table write"]


async def test_unpatched_faust_s_buffer_crashes_on_a_write_whose_transaction_ended():
    buffer, _late, log = await _send_a_late_write_then_another(
        faust_patches._original_send_pending)
    assert buffer.crashed
    assert isinstance(buffer.crash_reason, IllegalOperation)
    assert log == []


# --- the private names the patches rely on -------------------------------------------


def _parameters(function: object) -> list[str]:
    return list(inspect.signature(function).parameters)  # type: ignore[arg-type]


def test_faust_recovery_still_has_what_the_recovery_patch_relies_on():
    recovery_class = faust_recovery.Recovery
    assert _parameters(faust_patches._original_recovery_wait) == ["self", "coro", "timeout"]
    assert isinstance(inspect.getattr_static(recovery_class, "signal_recovery_start"), property)
    assert issubclass(RebalanceAgain, Exception)
    loop = inspect.getsource(recovery_class._restart_recovery.fun)  # a mode ServiceTask
    # The wait whose RebalanceAgain the loop swallows, the loop catching what the
    # patch raises, and the steps after it that go through `_wait`.
    assert "await self._wait(self.signal_recovery_end.wait())" in loop
    assert "except RebalanceAgain" in loop
    assert "self._seek_offsets" in loop
    assert "self.on_recovery_completed" in loop


def test_faust_and_aiokafka_still_have_what_the_other_patches_rely_on():
    thread = faust_aiokafka.AIOKafkaConsumerThread
    assert _parameters(thread._highwaters) == ["self", "partitions"]
    assert "self._highwaters" in inspect.getsource(thread.highwaters)
    assert callable(thread._ensure_consumer)
    assert callable(AIOKafkaConsumer.end_offsets)
    producer = faust_aiokafka.Producer
    assert _parameters(faust_patches._original_flush) == ["self"]
    assert "self.buffer.flush()" in inspect.getsource(faust_patches._original_flush)
    assert _parameters(producer.commit_transactions) == [
        "self", "tid_to_offset_map", "group_id", "start_new_transaction"]
    assert isinstance(inspect.getattr_static(producer, "_trn_locks"), dict)
    assert isinstance(inspect.getattr_static(producer, "_transaction_producers"), dict)
    # A buffered send that raises IllegalOperation is one whose transaction ended (2c):
    # the only IllegalOperation aiokafka's send raises.
    assert _parameters(faust_patches._original_send_pending) == ["self", "fut"]
    send = inspect.getsource(AIOKafkaProducer.send)
    assert send.count("IllegalOperation") == 1
    assert 'raise IllegalOperation("Can\'t send messages while not in transaction")' in send


async def test_an_aiokafka_transactional_producer_still_exposes_its_transaction_state():
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1", transactional_id="patch-test")
    assert producer._txn_manager.is_in_transaction() is False
    for name in ("send_offsets_to_transaction", "commit_transaction", "begin_transaction"):
        assert callable(getattr(producer, name))


# --- the consumer thread's fetches are not held back by a partition not yet drained --


async def _fetcher_holding_records_of(held: TopicPartition, other: TopicPartition) -> Fetcher:
    """aiokafka's own fetcher, on a one-broker cluster, that has fetched records of
    `held` the consumer has not taken yet; `other` has none. Its background fetch
    loop is stopped, so the test asks it for its next fetch itself."""
    cluster = types.SimpleNamespace(leader_for_partition=lambda tp: 0,
                                    broker_metadata=lambda node_id: object())
    client = types.SimpleNamespace(_loop=asyncio.get_running_loop(), cluster=cluster,
                                   _metadata_max_age_ms=300_000)
    subscriptions = SubscriptionState()
    subscriptions.assign_from_user({held, other})
    assignment = subscriptions.subscription.assignment
    for tp in (held, other):
        assignment.state_value(tp).seek(0)
    fetcher = Fetcher(client, subscriptions, isolation_level="read_committed")
    fetcher._fetch_task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await fetcher._fetch_task
    return fetcher


def _fetched_after(fetcher: Fetcher, held: TopicPartition) -> list[TopicPartition]:
    """The partitions of the fetch the fetcher sends right after records of `held` arrived."""
    assignment = fetcher._subscriptions.subscription.assignment
    fetcher._records[held] = FetchResult(held, assignment=assignment, partition_records=None,
                                         backoff=fetcher._prefetch_backoff)
    requests, *_ = fetcher._get_actions_per_node(assignment)
    return [TopicPartition(topic, partition[0])
            for _, request in requests for topic, partitions in request.topics
            for partition in partitions]


async def test_a_partition_not_yet_drained_does_not_hold_back_the_fetch_of_the_others():
    held, other = TopicPartition("state", 0), TopicPartition("state", 1)
    fetcher = await _fetcher_holding_records_of(held, other)
    faust_patches.no_fetch_backoff(types.SimpleNamespace(_fetcher=fetcher))
    assert _fetched_after(fetcher, held) == [other]


async def test_unpatched_aiokafka_fetches_nothing_from_the_broker_until_that_partition_is_drained():
    held, other = TopicPartition("state", 0), TopicPartition("state", 1)
    fetcher = await _fetcher_holding_records_of(held, other)
    assert _fetched_after(fetcher, held) == []


async def test_the_consumer_thread_s_consumer_has_no_backoff_and_a_short_poll_once_started(
        monkeypatch):
    consumer = types.SimpleNamespace(_fetcher=types.SimpleNamespace(_prefetch_backoff=0.1,
                                                                    _fetch_max_wait_ms=1500))

    async def start(thread: object) -> None:  # Faust's own creates and starts the consumer
        thread._consumer = consumer

    monkeypatch.setattr(faust_patches, "_original_consumer_thread_on_start", start)
    await faust_patches._consumer_thread_on_start(types.SimpleNamespace())
    assert consumer._fetcher._prefetch_backoff == faust_patches.FETCH_BACKOFF == 0.0
    assert consumer._fetcher._fetch_max_wait_ms == faust_patches.FETCH_MAX_WAIT_MS


# --- no record of a paused partition is taken while no partition is active (patch 14)


class _Prefetched:
    """What aiokafka's ``FetchResult`` reads of the records it fetched for a
    partition: each record (here its offset), and the offset after the last one
    read."""

    def __init__(self, offsets: list[int]) -> None:
        self._offsets = iter(offsets)
        self.next_fetch_offset = offsets[0]

    def __iter__(self) -> _Prefetched:
        return self

    def __next__(self) -> int:
        offset = next(self._offsets)
        self.next_fetch_offset = offset + 1
        return offset


async def _thread_with_records_of(paused: TopicPartition, offsets: list[int]) -> tuple[
        object, object]:
    """Faust's consumer thread (what ``_fetch_records`` uses of it) and its aiokafka
    consumer, whose own fetcher has fetched `offsets` of `paused`: aiokafka goes on
    fetching a partition Faust has paused, which only leaves it out of the
    partitions it asks for."""
    fetcher = await _fetcher_holding_records_of(paused, TopicPartition("state", 1))
    assignment = fetcher._subscriptions.subscription.assignment
    assignment.state_value(paused).seek(offsets[0])
    fetcher._records[paused] = FetchResult(paused, assignment=assignment,
                                           partition_records=_Prefetched(offsets), backoff=0)
    thread = types.SimpleNamespace(consumer=types.SimpleNamespace(flow_active=True))
    return thread, types.SimpleNamespace(_fetcher=fetcher, _closed=False)


async def test_with_no_partition_active_the_consumer_thread_takes_no_record_of_a_paused_one():
    paused = TopicPartition("state", 6)
    thread, consumer = await _thread_with_records_of(paused, [26, 27, 29])
    active: set[TopicPartition] = set()
    assert await faust_patches._fetch_records(thread, consumer, active, timeout=0) == {}
    active.add(paused)  # resumed: its records come from the first one
    assert await faust_patches._fetch_records(thread, consumer, active, timeout=0) == {
        paused: [26, 27, 29]}


async def test_unpatched_faust_takes_every_prefetched_record_while_no_partition_is_active():
    """aiokafka reads an empty set of partitions as every partition. If this
    fails, it no longer does, and patch 14 is moot."""
    paused = TopicPartition("state", 6)
    thread, consumer = await _thread_with_records_of(paused, [26, 27, 29])
    assert await faust_patches._original_fetch_records(thread, consumer, set(), timeout=0) == {
        paused: [26, 27, 29]}


def test_the_active_partitions_are_seen_as_they_change_and_never_read_as_all():
    active: set[TopicPartition] = set()
    view = faust_patches.ActiveOnly(active)
    assert view
    assert TopicPartition("state", 6) not in view
    active.add(TopicPartition("state", 6))
    assert TopicPartition("state", 6) in view


# --- the consumer thread's long poll holds its other requests back briefly (patch 9)


def _fetch_waits_ms(fetcher: Fetcher) -> list[int]:
    """How long each fetch the fetcher would send now lets the broker wait for records."""
    requests, *_ = fetcher._get_actions_per_node(fetcher._subscriptions.subscription.assignment)
    return [request.build(FetchRequest_v4).max_wait_time for _, request in requests]


async def test_the_consumer_thread_s_fetches_wait_a_tenth_of_a_second_for_records():
    fetcher = await _fetcher_holding_records_of(TopicPartition("state", 0),
                                                TopicPartition("state", 1))
    faust_patches.short_long_poll(types.SimpleNamespace(_fetcher=fetcher))
    assert _fetch_waits_ms(fetcher) == [faust_patches.FETCH_MAX_WAIT_MS] == [100]


def test_faust_still_makes_its_worker_consumer_wait_one_and_a_half_seconds():
    """If this fails, Faust has changed how its consumer is made: patch 9 may be
    moot, or may now undo a setting of the app's."""
    source = inspect.getsource(faust_aiokafka.AIOKafkaConsumerThread._create_worker_consumer)
    assert "fetch_max_wait_ms=1500" in source


# --- the table manager starts its recovery at once (patch 10) ---------------------


class _StartingTableManager:
    """What ``TableManager.on_start`` touches, each step noted in `steps`."""

    def __init__(self, should_stop: bool = False) -> None:
        self.should_stop = should_stop
        self.steps: list[str] = []

        async def start() -> None:
            self.steps.append("recovery started")

        self.recovery = types.SimpleNamespace(start=start)

    async def sleep(self, seconds: float) -> None:
        self.steps.append(f"slept {seconds} s")

    async def _update_channels(self) -> None:
        self.steps.append("tables closed")


async def test_the_table_manager_closes_its_tables_and_starts_recovery_without_sleeping():
    faust_patches.apply()
    manager = _StartingTableManager()
    await faust_tables_manager.TableManager.on_start(manager)
    assert manager.steps == ["tables closed", "recovery started"]


async def test_faust_s_own_table_manager_sleeps_a_second_first_and_a_stopping_one_does_nothing():
    manager = _StartingTableManager()
    await faust_patches._original_table_manager_on_start(manager)
    assert manager.steps == ["slept 1.0 s", "tables closed", "recovery started"]
    stopping = _StartingTableManager(should_stop=True)
    await faust_tables_manager.TableManager.on_start(stopping)
    assert stopping.steps == []


# --- a connection lost during FindCoordinator is retried (patch 8) ---------------


class _ResettingClient:
    """A client whose first coordinator lookup loses its connection mid-request."""

    def __init__(self, resets: int) -> None:
        self.resets = resets
        self.lookups = 0
        self.metadata_updates = 0

    async def coordinator_lookup(self, coordinator_type, coordinator_key):
        self.lookups += 1
        if self.lookups <= self.resets:
            raise KafkaConnectionError("Connection at 127.0.0.1:9092 closed")
        return 1

    def force_metadata_update(self):
        self.metadata_updates += 1
        done = asyncio.get_running_loop().create_future()
        done.set_result(True)
        return done

    async def ready(self, node_id, group=None):
        return True


def _sender(client, sender_type: type[Sender] = faust_patches.CoordinatorRetrySender) -> Sender:
    txn_manager = types.SimpleNamespace(transactional_id="app-0-1")
    return sender_type(client, acks=-1, txn_manager=txn_manager, message_accumulator=None,
                       retry_backoff_ms=1, request_timeout_ms=1000)


async def test_a_coordinator_lookup_whose_connection_was_lost_is_retried():
    client = _ResettingClient(resets=2)
    node = await _sender(client)._find_coordinator(CoordinationType.GROUP, "app")
    assert node == 1
    assert client.lookups == 3
    assert client.metadata_updates >= 2


async def test_the_worker_s_sender_looks_a_coordinator_up_again_at_most_a_bounded_number_of_times():
    retries = faust_patches.COORDINATOR_RETRIES
    found = _ResettingClient(resets=retries)
    assert await _sender(found)._find_coordinator(CoordinationType.GROUP, "app") == 1
    assert found.lookups == retries + 1
    lost = _ResettingClient(resets=retries + 1)
    with pytest.raises(KafkaError) as failed:
        await _sender(lost)._find_coordinator(CoordinationType.GROUP, "app")
    assert isinstance(failed.value.__cause__, KafkaConnectionError)
    assert lost.lookups == retries + 1


async def test_aiokafka_s_own_sender_still_lets_a_lost_connection_end_the_lookup():
    faust_patches.apply()
    client = _ResettingClient(resets=1)
    with pytest.raises(KafkaError):
        await _sender(client, Sender)._find_coordinator(CoordinationType.GROUP, "app")
    assert client.lookups == 1


async def test_other_lookup_failures_are_raised_as_before():
    class _Refusing(_ResettingClient):
        async def coordinator_lookup(self, coordinator_type, coordinator_key):
            self.lookups += 1
            raise GroupAuthorizationFailedError()

    refusing = _Refusing(0)
    with pytest.raises(GroupAuthorizationFailedError):
        await _sender(refusing)._find_coordinator(CoordinationType.GROUP, "app")
    assert refusing.lookups == 1


async def test_the_worker_s_faust_producer_builds_its_clients_with_the_retrying_sender():
    faust_patches.apply()
    app = faust.App("patch-test", broker="kafka://127.0.0.1:1", store="memory://")
    worker_client = app.producer._new_producer(transactional_id="patch-test-0-0")
    plain_client = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1")
    try:
        assert isinstance(worker_client, faust_patches.WorkerProducer)
        assert type(worker_client._sender) is faust_patches.CoordinatorRetrySender
        assert type(plain_client._sender) is Sender
    finally:
        await worker_client.stop()
        await plain_client.stop()


def test_installing_the_worker_s_patches_leaves_aiokafka_s_sender_as_aiokafka_has_it():
    """The library's role producers run in the worker's process too, with the
    behaviour aiokafka's (and the library's) tests know."""
    probe = ("from aiokafka.producer.sender import Sender; "
             "original = Sender._find_coordinator; "
             "from app import faust_patches; faust_patches.apply(); "
             "print(Sender._find_coordinator is original, "
             "Sender._find_coordinator.__module__)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "aiokafka.producer.sender"]


# --- each record of a stream partition reaches the streams once, none is dropped ----


def _queued(flow: FlowControlEvent) -> FlowControlQueue:
    """A stream's queue: Faust's channels empty theirs when the flow resumes."""
    return FlowControlQueue(flow_control=flow, clear_on_resume=True)


def test_resuming_a_flow_already_active_keeps_the_events_queued():
    faust_patches.apply()
    flow = FlowControlEvent(initially_suspended=False)
    queue = _queued(flow)
    queue.put_nowait("event of offset 5")
    flow.resume()
    assert queue.qsize() == 1


def test_resuming_a_suspended_flow_empties_the_queues_as_before():
    faust_patches.apply()
    flow = FlowControlEvent(initially_suspended=False)
    queue = _queued(flow)
    flow.suspend()
    queue.put_nowait("event fetched before a rebalance")
    flow.resume()
    assert queue.empty()
    assert flow.is_active()


@pytest.fixture
async def recovery_at_its_end(monkeypatch):
    """Faust's own recovery of an app that is never started, at the end of a
    rebalance, whose consumer seeks as a fetch hands over a record of the
    stream partition the recovery has just resumed: the fetcher puts it in the
    stream's queue while the seek's OffsetFetch is under way."""
    app = faust.App("patch-test", broker="kafka://127.0.0.1:1", store="memory://")
    tp = faust.types.TP("state", 9)
    queue = _queued(app.flow_control)
    consumer = app.consumer

    async def perform_seek() -> None:
        queue.put_nowait("event of offset 59")

    async def nothing() -> None:
        return None

    monkeypatch.setattr(consumer, "assignment", lambda: {tp})
    monkeypatch.setattr(consumer, "resume_partitions", lambda tps: None)
    monkeypatch.setattr(consumer, "perform_seek", perform_seek)
    monkeypatch.setattr(consumer, "resume_flow", lambda: None)
    monkeypatch.setattr(app._fetcher, "maybe_start", nothing)
    app.flow_control.resume()  # the recovery resumed the flow to read the changelogs
    return app.tables.recovery, queue


async def test_a_record_handed_over_during_the_last_seek_of_a_recovery_stays_queued(
        recovery_at_its_end):
    faust_patches.apply()
    recovery, queue = recovery_at_its_end
    await recovery.on_recovery_completed(0)
    assert queue.qsize() == 1


async def test_unpatched_faust_empties_it_at_the_resume_after_the_seek(
        recovery_at_its_end, monkeypatch):
    """The loss, in miniature: Faust resumes the flow again after the seek, and a
    resume empties the queues even when the flow is active. The consumer has
    counted the record as read, so fetched again from the committed offset it
    is skipped, and the commit after the next record goes past it."""
    monkeypatch.setattr(FlowControlEvent, "resume", faust_patches._original_flow_resume)
    recovery, queue = recovery_at_its_end
    await recovery.on_recovery_completed(0)
    assert queue.empty()


class _Conductor:
    """The records the consumer handed to the streams (the conductor's callback)."""

    def __init__(self) -> None:
        self.handed: list[int] = []
        self.gate: asyncio.Event | None = None

    async def __call__(self, message: object) -> None:
        if self.gate is not None:
            await self.gate.wait()
        self.handed.append(message.offset)


def _consumer(flow: FlowControlEvent, changelog: bool = False) -> types.SimpleNamespace:
    return types.SimpleNamespace(app=types.SimpleNamespace(flow_control=flow),
                                 _is_changelog_tp=lambda tp: changelog)


def _message(offset: int, partition: int = 9) -> types.SimpleNamespace:
    return types.SimpleNamespace(tp=faust.types.TP("state", partition), offset=offset)


async def _hand(callback, *offsets: int, partition: int = 9) -> None:
    for offset in offsets:
        await callback(_message(offset, partition))


async def test_a_record_fetched_again_after_a_seek_is_not_handed_over_twice():
    flow = FlowControlEvent(initially_suspended=False)
    conductor = _Conductor()
    hand_over = faust_patches._handed_once(_consumer(flow), conductor)
    await _hand(hand_over, 59, 60)
    await _hand(hand_over, 59, 60, 61)  # from the committed offset, after the seek
    await _hand(hand_over, 59, partition=10)  # another partition's own offsets
    assert conductor.handed == [59, 60, 61, 59]


async def test_once_the_queues_are_emptied_the_records_are_handed_over_again():
    faust_patches.apply()
    flow = FlowControlEvent(initially_suspended=False)
    conductor = _Conductor()
    hand_over = faust_patches._handed_once(_consumer(flow), conductor)
    await _hand(hand_over, 59, 60)
    flow.suspend()
    flow.clear()  # a rebalance: the queued events are gone
    await _hand(hand_over, 59, 60)
    assert conductor.handed == [59, 60, 59, 60]


async def test_a_hand_over_the_queues_were_emptied_during_does_not_count():
    faust_patches.apply()
    flow = FlowControlEvent(initially_suspended=False)
    conductor = _Conductor()
    conductor.gate = asyncio.Event()
    hand_over = faust_patches._handed_once(_consumer(flow), conductor)
    handing = asyncio.ensure_future(_hand(hand_over, 59))
    await _until(lambda: conductor.gate._waiters, 1.0)  # the conductor waits on a full queue
    flow.suspend()
    flow.clear()
    conductor.gate.set()
    await handing
    conductor.gate = None
    await _hand(hand_over, 59)
    assert conductor.handed == [59, 59]


async def test_changelog_records_are_handed_over_each_time_they_are_read():
    flow = FlowControlEvent(initially_suspended=False)
    conductor = _Conductor()
    hand_over = faust_patches._handed_once(_consumer(flow, changelog=True), conductor)
    await _hand(hand_over, 5, 6)
    await _hand(hand_over, 5, 6)  # the table recovery sought back
    assert conductor.handed == [5, 6, 5, 6]


async def test_a_partition_sought_is_handed_over_again_from_its_new_offset():
    flow = FlowControlEvent(initially_suspended=False)
    conductor = _Conductor()
    consumer = _consumer(flow)
    hand_over = faust_patches._handed_once(consumer, conductor)
    await _hand(hand_over, 59, 60)
    sought: list[tuple[object, int]] = []

    async def _seek(partition: object, offset: int) -> None:
        sought.append((partition, offset))

    consumer._seek = _seek
    consumer._read_offset = {}
    consumer.log = types.SimpleNamespace(dev=lambda *args: None)
    await faust_patches._seek(consumer, faust.types.TP("state", 9), 59)
    await _hand(hand_over, 59, 60)
    assert conductor.handed == [59, 60, 59, 60]
    assert sought == [(faust.types.TP("state", 9), 59)]


async def test_the_fetch_loop_hands_its_records_over_through_the_once_only_callback():
    faust_patches.apply()
    app = faust.App("patch-test", broker="kafka://127.0.0.1:1", store="memory://")
    consumer = app.consumer
    conductor = consumer.callback
    seen: list[object] = []

    async def _original(self: object, fetcher: object) -> None:
        seen.append(self.callback)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(faust_patches, "_original_drain_messages", _original)
        await faust_patches._drain_messages(consumer, None)
        await faust_patches._drain_messages(consumer, None)  # the fetcher restarted
    assert seen[0] is seen[1] is not conductor
    assert getattr(seen[0], faust_patches._HANDED)


# --- a recovery never ends a partition at a position it has not sought -------------


class _ChangelogReader:
    """The consumer a recovery step is given: the partitions' high watermarks, and seeks."""

    def __init__(self, highwater: int) -> None:
        self.highwater = highwater
        self.sought: dict[object, int] = {}

    async def highwaters(self, *tps: object) -> dict[object, int]:
        return {tp: self.highwater + 1 for tp in tps}

    async def seek_wait(self, offsets: dict[object, int]) -> None:
        self.sought.update(offsets)


CHANGELOG = faust.types.TP("role_state-changelog", 9)


async def _recovery_round_begun(recovery: faust_recovery.Recovery) -> _ChangelogReader:
    """A recovery round that has built partition 9's high watermark (14) and start
    (nothing applied, -1), and not yet sought it."""
    reader = _ChangelogReader(highwater=14)
    await faust_patches._build_highwaters(recovery, reader, {CHANGELOG},
                                          recovery.active_highwaters, "active")
    recovery.active_offsets[CHANGELOG] = -1
    return reader


async def test_before_the_recovery_seeks_a_partition_its_position_is_where_it_will_read_from(
        consumer):
    """The consumer says 100: where a fetch the recovery never saw left it."""
    recovery = consumer.app.tables.recovery
    reader = await _recovery_round_begun(recovery)
    assert recovery.active_highwaters[CHANGELOG] == 14
    assert await faust_patches._position(consumer, CHANGELOG) == -1
    await faust_patches._seek_offsets(recovery, reader, {CHANGELOG}, recovery.active_offsets,
                                      "active")
    assert reader.sought == {CHANGELOG: 0}
    assert await faust_patches._position(consumer, CHANGELOG) == 100


async def _aborted_after_two_idle_polls(app: faust.App, monkeypatch) -> int:
    """Run Faust's own changelog loop on an empty queue until it has asked the
    position of partition 9 twice or ended the partition as "aborted
    transactions", and give the offset it then holds for it (14 if ended)."""
    asked: list[object] = []
    consumer = app.consumer

    async def position(tp: object) -> int | None:
        asked.append(tp)
        return await faust_patches._position(consumer, tp)

    async def stale(self: object, tp: object) -> int:
        return 15  # a fetch that went past the partition's records, which the recovery never got

    monkeypatch.setattr(faust_patches, "_original_position", stale)
    monkeypatch.setattr(consumer, "position", position)
    recovery = app.tables.recovery
    slurp = asyncio.ensure_future(faust_recovery.Recovery._slurp_changelogs.fun(recovery))
    try:
        # Asked twice without ending it, or ended it.
        await _until(lambda: len(asked) >= 2 or slurp.done()
                     or recovery.active_offsets[CHANGELOG] == 14, 10.0)
    finally:
        slurp.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await slurp
    return recovery.active_offsets[CHANGELOG]


def test_a_recovery_builds_the_active_high_watermarks_before_it_seeks_the_partitions():
    """What patch 13 relies on: a recovery round's first step for the active
    partitions is their high watermarks (titled "active"), and its seek comes after."""
    loop = inspect.getsource(faust_recovery.Recovery._restart_recovery.fun)
    first = loop.index("self._build_highwaters")
    assert '"active"' in loop[first:loop.index(")", loop.index("active_highwaters", first))]
    assert loop.index("self._seek_offsets") > first
    assert _parameters(faust_patches._original_build_highwaters) == [
        "self", "consumer", "tps", "destination", "title"]
    assert _parameters(faust_patches._original_seek_offsets) == [
        "self", "consumer", "tps", "offsets", "title"]


def _exactly_once_app() -> faust.App:
    app = faust.App("patch-test-abort", broker="kafka://127.0.0.1:1", store="memory://",
                    processing_guarantee="exactly_once")
    app.in_worker = True  # Faust uses transactions only in a worker
    assert app.in_transaction
    return app


async def test_a_recovery_does_not_end_a_partition_it_has_not_sought_yet(monkeypatch):
    faust_patches.apply()
    app = _exactly_once_app()
    await _recovery_round_begun(app.tables.recovery)
    assert await _aborted_after_two_idle_polls(app, monkeypatch) == -1


async def test_unpatched_faust_ends_it_as_aborted_transactions_and_reads_none_of_it(monkeypatch):
    """The loss, in miniature: Faust's changelog loop, idle between two steps of a
    recovery, compares the consumer's position with the high watermark before the
    recovery has sought the partition, finds it past, and marks the partition read:
    the table keeps none of its values."""
    faust_patches.apply()
    app = _exactly_once_app()
    recovery = app.tables.recovery
    recovery.active_highwaters[CHANGELOG] = 14  # built by Faust's own step: not noted
    recovery.active_offsets[CHANGELOG] = -1
    assert await _aborted_after_two_idle_polls(app, monkeypatch) == 14

"""The worker's changes to faust-streaming, mode-streaming and aiokafka
(`app.faust_changes`): what each changes, that Faust's own classes are left as
they are, and that every private name they rely on is still there (a Faust or
aiokafka upgrade that renames one must fail here, not in production).

A change is a mixin over one of Faust's classes; a test of one either uses the
worker's subclass built by `app.faust_changes.classes` or puts the mixin over a
stand-in for the Faust class it extends."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
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
from faust.stores import rocksdb as faust_rocksdb
from faust.tables import manager as faust_tables_manager
from faust.tables import recovery as faust_recovery
from faust.transport import consumer as faust_consumer
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.transport.producer import ProducerBuffer
from faust.types import TP
from mode.utils.queues import FlowControlEvent, FlowControlQueue

from app.faust_changes import ChangedApp, classes, committing, fetching, producing, recovering
from app.faust_changes.persisting import CommitMarked
from app.faust_changes.registry import CHANGES

RebalanceAgain = faust_recovery.RebalanceAgain
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def recovery():
    """The worker's table-recovery service of an app that is never started."""
    return _app("change-test").tables.recovery


def _app(name: str, **options: object) -> ChangedApp:
    """An app of the worker's Faust classes, never started."""
    return ChangedApp(name, broker="kafka://127.0.0.1:1", store="memory://", **options)


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


# --- FAUST-1: a step of a superseded recovery never starts ----------------------------


async def test_a_step_of_a_superseded_recovery_is_never_started(recovery):
    recovery.signal_recovery_start.set()  # a newer rebalance is pending
    step = Step()
    coro = step()
    with pytest.raises(RebalanceAgain):
        await recovery._wait(coro)
    assert not step.ran
    assert coro.cr_frame is None  # closed: no "coroutine was never awaited" warning


async def test_faust_s_own_wait_runs_it_and_its_error_wins_over_the_rebalance(recovery):
    """The crash, in miniature: with a rebalance already pending, Faust's own
    ``_wait`` still starts the step, and a seek that fails at once (offset
    None) raises its ValueError instead of RebalanceAgain."""
    recovery.signal_recovery_start.set()
    seek = Step(ValueError("Offset must be a positive integer"))
    with pytest.raises(ValueError, match="positive integer"):
        await faust_recovery.Recovery._wait(recovery, seek())
    assert seek.ran
    changed = Step(ValueError("Offset must be a positive integer"))
    with pytest.raises(RebalanceAgain):
        await recovery._wait(changed())
    assert not changed.ran


async def test_without_a_pending_rebalance_the_step_runs_as_before(recovery):
    step = Step()
    await recovery._wait(step())
    assert step.ran
    failing = Step(ValueError("a real error"))
    with pytest.raises(ValueError, match="a real error"):
        await recovery._wait(failing())


async def test_a_rebalance_during_the_step_still_raises_rebalance_again(recovery):
    release = asyncio.Event()

    async def slow_step() -> None:
        await release.wait()

    async def rebalance_soon() -> None:
        await asyncio.sleep(0)
        recovery.signal_recovery_start.set()

    rebalance = asyncio.create_task(rebalance_soon())
    with pytest.raises(RebalanceAgain):
        await recovery._wait(slow_step())
    await rebalance


def _versions(faust_version: str = "0.15.3", mode_version: str = "0.7.1") -> dict[str, str]:
    return {"faust-streaming": faust_version, "mode-streaming": mode_version,
            "aiokafka": "0.14.0"}


def _mixins(worker_classes) -> set[type]:
    """Every mixin in the MRO of the worker's classes."""
    transport = worker_classes.transport
    built = (transport.Consumer, transport.Consumer.ConsumerThread, transport.Producer,
             transport.Producer.ProducerBuffer, transport.TransactionManager,
             worker_classes.table_manager, worker_classes.table_manager.Recovery,
             worker_classes.table, worker_classes.table.RocksDBStore,
             worker_classes.flow_control)
    return {cls for each in built for cls in each.__mro__}


@pytest.mark.parametrize("versions", [_versions("0.99.0"), _versions(mode_version="0.99.0")])
def test_on_an_untested_version_no_exact_change_is_applied(versions):
    worker_classes = classes(versions)
    exact = {change.id for change in CHANGES if change.exact}
    assert {change.id for change in worker_classes.left_out} == exact
    assert exact >= {"FAUST-1", "FAUST-2", "FAUST-6", "FAUST-7", "FAUST-10", "FAUST-12",
                     "FAUST-13", "FAUST-15"}
    mixins = _mixins(worker_classes)
    for change in CHANGES:
        assert (set(change.mixins.values()) <= mixins) is (not change.exact), change.id


def test_on_the_tested_versions_every_change_is_applied():
    worker_classes = classes(_versions())
    assert worker_classes.left_out == ()
    assert worker_classes.applied == CHANGES
    assert {mixin for change in CHANGES for mixin in change.mixins.values()} <= _mixins(
        worker_classes)


def test_an_app_on_an_untested_version_says_which_changes_it_leaves_out(monkeypatch, caplog):
    monkeypatch.setattr("app.faust_changes.installed_versions", lambda: _versions("0.99.0"))
    with caplog.at_level("WARNING", logger="app.faust_changes"):
        app = _app("change-test-untested")
    assert recovering.SupersededStepsNeverStart not in type(app.tables.recovery).__mro__
    assert "FAUST-1, FAUST-2" in caplog.text
    assert "not applied" in caplog.text


# --- FAUST-2: the recovery's end found without ten idle seconds ----------------------


def test_the_tables_changelog_queue_is_the_recovery_queue():
    app = _app("change-test-queue")
    queue = app.tables.changelog_queue
    assert isinstance(queue, recovering.RecoveryQueue)
    assert queue is app.tables.changelog_queue  # one queue, as Faust's property keeps
    assert queue.maxsize == app.conf.stream_buffer_maxsize


async def test_an_empty_changelog_queue_gives_up_after_the_idle_time_with_timeout_error():
    app = _app("change-test-idle")
    queue = recovering.RecoveryQueue(flow_control=app.flow_control)
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


# --- FAUST-6: a partition recovered only once the records before its position are applied


class Record:
    def __init__(self, offset: int) -> None:
        self.offset = offset


class _FaustConsumer:
    """A stand-in for Faust's consumer: its thread says every partition is at offset
    100, and its next batch is what the test puts in `batch`."""

    def __init__(self) -> None:
        self.app = _app("change-test-position")
        self.batch: dict[object, list[Record]] = {}

    async def position(self, tp: object) -> int | None:
        return 100

    async def _wait_next_records(self, timeout: float) -> tuple[dict, set]:  # noqa: ASYNC109
        batch, self.batch = self.batch, {}
        return batch, set(batch)


class _Consumer(recovering.PositionNotPastInFlight, recovering.PositionOfUnsought,
                _FaustConsumer):
    """The two changes to the consumer's positions, in the worker's order."""


@pytest.fixture
def consumer():
    return _Consumer()


async def test_a_position_is_not_past_the_first_record_of_a_batch_the_fetcher_still_holds(
        consumer):
    consumer.batch = {"tp-a": [Record(40), Record(41)]}
    await consumer._wait_next_records(1.0)
    assert await consumer.position("tp-a") == 40
    assert await consumer.position("tp-b") == 100  # not in the batch


async def test_a_handed_on_batch_still_in_the_changelog_queue_holds_the_position_back(consumer):
    consumer.batch = {"tp-a": [Record(40)]}
    await consumer._wait_next_records(1.0)
    queue = consumer.app.tables.changelog_queue
    queue.put_nowait("the batch's event, not yet taken by the recovery")
    await consumer._wait_next_records(1.0)  # the fetcher asks for the next
    assert await consumer.position("tp-a") == 40
    queue.get_nowait()
    assert await consumer.position("tp-a") == 100


async def test_once_nothing_is_in_flight_the_position_is_the_consumer_s_from_then_on(consumer):
    consumer.batch = {"tp-a": [Record(40)]}
    await consumer._wait_next_records(1.0)
    await consumer._wait_next_records(1.0)
    assert await consumer.position("tp-a") == 100
    consumer.batch = {"tp-b": [Record(7)]}  # a later batch holds back only its partitions
    await consumer._wait_next_records(1.0)
    assert await consumer.position("tp-a") == 100
    assert await consumer.position("tp-b") == 7


def test_the_recovery_still_ends_a_partition_at_the_main_loop_consumer_s_position():
    """What FAUST-6 relies on: the recovery asks the app's consumer (the main
    loop's, which the change extends), the fetcher asks it for each batch, and the
    position goes through the consumer thread."""
    slurp = inspect.getsource(faust_recovery.Recovery._slurp_changelogs.fun)
    assert "await self.app.consumer.position(tp)" in slurp
    assert "offsets[tp] = highwater" in slurp
    getmany = inspect.getsource(faust_consumer.Consumer.getmany)
    assert "await self._wait_next_records(timeout)" in getmany
    assert _parameters(faust_consumer.Consumer._wait_next_records) == ["self", "timeout"]
    position = inspect.getsource(faust_consumer.ThreadDelegateConsumer.position)
    assert "self._thread.position(tp)" in position
    assert issubclass(faust_aiokafka.Consumer, faust_consumer.ThreadDelegateConsumer)


def test_the_worker_s_app_is_built_of_the_worker_s_classes_and_another_app_is_not(tmp_path):
    worker = _app("change-test-scoped", datadir=tmp_path / "worker")
    plain = faust.App("change-test-plain", broker="kafka://127.0.0.1:1", store="memory://",
                      datadir=tmp_path / "plain")
    transport = worker.worker_classes.transport
    assert type(worker.transport) is transport
    assert type(worker.consumer) is transport.Consumer
    assert type(worker.consumer._thread) is transport.Consumer.ConsumerThread
    assert type(worker.producer) is transport.Producer
    assert type(worker.producer.buffer) is transport.Producer.ProducerBuffer
    assert type(worker.tables) is worker.worker_classes.table_manager
    assert type(worker.tables.recovery) is worker.worker_classes.table_manager.Recovery
    assert type(worker.flow_control) is worker.worker_classes.flow_control
    assert type(worker.Table("scoped")) is worker.worker_classes.table
    assert type(worker.Table("stored")._new_store_by_url("rocksdb://")) is (
        worker.worker_classes.table.RocksDBStore)
    assert type(plain.transport) is faust_aiokafka.Transport
    assert type(plain.consumer) is faust_aiokafka.Consumer
    assert type(plain.consumer._thread) is faust_aiokafka.AIOKafkaConsumerThread
    assert type(plain.producer) is faust_aiokafka.Producer
    assert type(plain.producer.buffer) is ProducerBuffer
    assert type(plain.tables) is faust_tables_manager.TableManager
    assert type(plain.tables.recovery) is faust_recovery.Recovery
    assert type(plain.flow_control) is FlowControlEvent
    assert type(plain.Table("plain")._new_store_by_url("rocksdb://")) is faust_rocksdb.Store
    assert type(plain.tables.changelog_queue) is not recovering.RecoveryQueue


# --- FAUST-4, FAUST-5, FAUST-7, FAUST-16: commits carry their events' table writes ---


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


def _buffer(buffer_type: type[ProducerBuffer] | None = None) -> ProducerBuffer:
    """The worker's producer buffer (or one of `buffer_type`), outside any producer."""
    buffer_type = buffer_type or classes().transport.Producer.ProducerBuffer
    buffer = buffer_type()
    buffer.app = types.SimpleNamespace(conf=types.SimpleNamespace(producer_threaded=False))
    return buffer


class _FaustProducer:
    """A stand-in for Faust's producer: its commit ends each transaction in turn,
    and its flush notes that it flushed the client."""

    def __init__(self, buffer: object, producers: dict[str, _TransactionProducer]) -> None:
        self.buffer = buffer
        self._transaction_producers = producers
        self._trn_locks = {tid: asyncio.Lock() for tid in producers}
        self.client_flushed = False

    async def commit_transactions(self, tid_to_offset_map: dict, group_id: str,
                                  start_new_transaction: bool = True) -> None:
        for tid, offsets in tid_to_offset_map.items():
            await self._transaction_producers[tid].send_offsets_to_transaction(offsets, group_id)
            await self._transaction_producers[tid].commit_transaction()

    async def flush(self) -> None:
        self.client_flushed = True


class _Producer(producing.CommitFlushesFirst, producing.CommitsSideBySide,
                producing.AtLeastOnceFlushDrains, _FaustProducer):
    """The worker's changes to the producer, in the worker's order."""


def _transactional(log: _Log) -> tuple[ProducerBuffer, _Producer]:
    """The worker's producer buffer, and a producer of one transaction ("tid") around it."""
    buffer = _buffer()
    return buffer, _Producer(buffer, {"tid": _TransactionProducer(log)})


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
        await producer.commit_transactions({"tid": {}}, "group", start_new_transaction)
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
    log = _Log()
    gate = asyncio.Event()
    buffer, producer = _transactional(log)
    await buffer.start()
    try:
        buffer.put(types.SimpleNamespace(
            message=types.SimpleNamespace(channel=_GatedChannel(log, gate))))
        await _until(lambda: log == ["take table write"], within=5)
        assert buffer.size == 0  # out of the queue, not yet in the transaction
        commit = asyncio.ensure_future(producer.commit_transactions(
            {"tid": {}}, "group", start_new_transaction))
        under_way = buffer.under_way
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
    monkeypatch.setattr(producing, "FLUSH_SECONDS", 0.2)
    log = _Log()
    gate = asyncio.Event()  # the send under way never ends while the commit waits
    buffer, producer = _transactional(log)
    await buffer.start()
    try:
        for _ in range(1 + writes_queued):
            buffer.put(types.SimpleNamespace(
                message=types.SimpleNamespace(channel=_GatedChannel(log, gate))))
        await _until(lambda: "take table write" in log, within=5)
        with pytest.raises(producing.UnflushedWritesError) as failed:
            await asyncio.wait_for(producer.commit_transactions({"tid": {}}, "group"), 5)
    finally:
        gate.set()
        # Faust's buffer refuses to stop with writes in its queue.
        await _until(lambda: log.count("send table write") == 1 + writes_queued, within=5)
        await buffer.stop()
    assert (failed.value.buffered, failed.value.sending) == (writes_queued, 1)
    assert "send offsets" not in log
    assert "commit" not in log


class _TimedChannel(_Channel):
    """A send that takes `seconds` (a broker slow to take each batch)."""

    def __init__(self, log: _Log, seconds: float) -> None:
        super().__init__(log)
        self.seconds = seconds

    async def publish_message(self, fut: object, wait: bool = False) -> None:
        await asyncio.sleep(self.seconds)
        await super().publish_message(fut, wait)


@pytest.mark.parametrize("commit", ["transactional", "at least once"])
async def test_a_flush_that_keeps_sending_is_not_cut_off_however_long_it_takes(
    monkeypatch, commit,
):
    """Only a flush that sends nothing for `FLUSH_SECONDS` fails its commit: a worker
    whose buffer took longer than that to drain, one send after another, failed
    its commit and exited."""
    monkeypatch.setattr(producing, "FLUSH_SECONDS", 0.2)
    log = _Log()
    buffer, producer = _transactional(log)
    await buffer.start()
    try:
        for _ in range(4):  # 0.4 s of sends in all, each within the 0.2 s
            buffer.put(types.SimpleNamespace(
                message=types.SimpleNamespace(channel=_TimedChannel(log, 0.1))))
        if commit == "transactional":
            await asyncio.wait_for(producer.commit_transactions({"tid": {}}, "group"), 5)
        else:
            await asyncio.wait_for(producer.flush(), 5)
            log.append("flushed")
    finally:
        await buffer.stop()
    assert log[:4] == ["send table write"] * 4
    assert log[4:] == (["send offsets", "commit"] if commit == "transactional" else ["flushed"])


async def test_a_flush_waits_for_the_table_writes_present_at_its_start_and_not_for_later_ones(
    monkeypatch,
):
    """The fold goes on buffering writes while a commit flushes: a flush that waited
    for an empty buffer chased them for as long as the fold ran."""
    monkeypatch.setattr(producing, "FLUSH_SECONDS", 0.5)
    log = _Log()
    earlier, later = asyncio.Event(), asyncio.Event()
    buffer, producer = _transactional(log)
    await buffer.start()
    try:
        for _ in range(2):
            buffer.put(types.SimpleNamespace(
                message=types.SimpleNamespace(channel=_GatedChannel(log, earlier))))
        commit = asyncio.ensure_future(producer.commit_transactions({"tid": {}}, "group"))
        await _until(lambda: buffer.under_way.waiting, within=5)
        for _ in range(3):  # buffered while the commit waits; never sent during it
            buffer.put(types.SimpleNamespace(
                message=types.SimpleNamespace(channel=_GatedChannel(log, later))))
        earlier.set()
        await asyncio.wait_for(commit, 5)
        committed = list(log)
    finally:
        earlier.set()
        later.set()
        await _until(lambda: log.count("send table write") == 5, within=5)
        await buffer.stop()
    assert committed == ["take table write", "send table write"] * 2 + [
        "take table write", "send offsets", "commit"]


async def test_an_at_least_once_flush_that_cannot_send_the_table_writes_fails_the_commit(
    monkeypatch,
):
    monkeypatch.setattr(producing, "FLUSH_SECONDS", 0.2)
    log = _Log()
    gate = asyncio.Event()
    buffer = _buffer()
    producer = _Producer(buffer, {})
    await buffer.start()
    try:
        buffer.put(types.SimpleNamespace(
            message=types.SimpleNamespace(channel=_GatedChannel(log, gate))))
        with pytest.raises(producing.UnflushedWritesError):
            await asyncio.wait_for(producer.flush(), 5)
    finally:
        gate.set()
        await buffer.stop()
    # Faust commits the offsets only once the flush has returned.
    assert not producer.client_flushed


class _CommittingConsumer:
    """A stand-in for Faust's consumer: its commit ends as `outcome` says."""

    def __init__(self, outcome: BaseException | None) -> None:
        self.outcome = outcome

    async def _commit_offsets(self, offsets: object, start_new_transaction: bool = True) -> bool:
        if self.outcome is not None:
            raise self.outcome
        return True


class _StalledCommitConsumer(committing.StalledFlushPutsCommitOff, _CommittingConsumer):
    """The worker's consumer change over the stand-in."""


async def test_a_commit_whose_flush_stalls_is_put_off_and_the_next_one_commits(caplog):
    """Faust's consumer treats a commit's error as a crash: a flush that sent
    nothing for `FLUSH_SECONDS` stopped the worker."""
    consumer = _StalledCommitConsumer(producing.UnflushedWritesError(3, 1))
    assert await consumer._commit_offsets({"tp": 7}) is False
    assert "commit put off to the next commit interval" in caplog.text
    consumer.outcome = None
    assert await consumer._commit_offsets({"tp": 9}) is True


async def test_a_commit_that_fails_for_any_other_reason_still_raises():
    fenced = faust_aiokafka.ProducerFenced()
    with pytest.raises(faust_aiokafka.ProducerFenced):
        await _StalledCommitConsumer(fenced)._commit_offsets({"tp": 7})


def test_the_worker_s_consumer_puts_off_a_stalled_commit_around_every_other_commit_change():
    """Outermost, it also catches the at-least-once flush that FAUST-17's change makes
    before noting its marks."""
    mro = classes().transport.Consumer.__mro__
    changes = [cls for cls in mro if "_commit_offsets" in vars(cls)
               and cls.__module__.startswith("app.")]
    assert changes[0] is committing.StalledFlushPutsCommitOff
    assert CommitMarked in changes


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


def _committing(producers: dict[str, _TransactionProducer]) -> _Producer:
    """A producer of `producers` whose buffer is empty."""
    buffer = types.SimpleNamespace(size=0, state="running", under_way=producing.SendsUnderWay())
    return _Producer(buffer, producers)


async def test_the_partitions_of_a_commit_end_their_transactions_side_by_side():
    log = _Log()
    all_sent = asyncio.Barrier(3)
    producers = {f"tid-{i}": _OverlappingProducer(log, all_sent) for i in range(3)}
    await asyncio.wait_for(_committing(producers).commit_transactions(
        {tid: {} for tid in producers}, "group"), 5)
    assert log == ["send offsets"] * 3 + ["commit"] * 3
    assert all(producer.in_transaction for producer in producers.values())  # begun again


async def test_a_failed_partition_commit_is_raised_once_the_others_have_ended():
    log = _Log()
    all_sent = asyncio.Barrier(2)
    fenced = faust_aiokafka.ProducerFenced()
    producers = {"fenced": _OverlappingProducer(log, all_sent, error=fenced),
                 "fine": _OverlappingProducer(log, all_sent)}
    with pytest.raises(faust_aiokafka.ProducerFenced):
        await asyncio.wait_for(_committing(producers).commit_transactions(
            {tid: {} for tid in producers}, "group"), 5)
    assert log == ["send offsets", "send offsets", "commit"]


class _TransactionalProducers:
    """Faust's producer as its transaction manager sees it: a producer per transactional id."""

    def __init__(self, transactional_ids: list[str]) -> None:
        self._transaction_producers = {tid: object() for tid in transactional_ids}
        self.stopped: list[str] = []

    async def stop_transaction(self, transactional_id: str) -> None:
        self._transaction_producers.pop(transactional_id, None)
        self.stopped.append(transactional_id)


async def test_a_rebalance_stops_the_producers_of_the_partitions_no_longer_active_here():
    """Faust stopped only the producers of revoked partitions that did not stay as
    standbys; a partition that went to another worker and came back found its
    old producer, fenced by the other worker's, and the next commit crashed the
    worker with ProducerFenced."""
    seen_by_faust: list[list[str]] = []

    class FaustTransactionManager:
        def __init__(self, producer: _TransactionalProducers) -> None:
            self.producer = producer

        def _tps_to_transactional_ids(self, tps: set) -> set[str]:
            return {f"app-{group}-{p}" for group, p in tps}

        async def on_rebalance(self, assigned, revoked, newly_assigned) -> None:
            seen_by_faust.append(sorted(self.producer._transaction_producers))

    class Manager(producing.FencedProducersStopped, FaustTransactionManager):
        pass

    producer = _TransactionalProducers(["app-0-0", "app-1-0", "app-1-1", "app-1-2"])
    manager = Manager(producer)
    # Partition 1 of group 1 went to another worker (this one keeps its changelog
    # as a standby, so Faust's revoked set does not name its producer).
    await manager.on_rebalance({(0, 0), (1, 0), (1, 2)}, set(), set())
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
    log = _Log()
    buffer = _buffer()
    producer = _Producer(buffer, {})
    await buffer.start()
    try:
        for _ in range(3):
            buffer.put(types.SimpleNamespace(
                message=types.SimpleNamespace(channel=_SlowChannel(log))))
        await producer.flush()
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


async def _send_a_late_write_then_another(buffer_type: type[ProducerBuffer] | None = None
                                          ) -> tuple[ProducerBuffer, faust.types.FutureMessage,
                                                     _Log]:
    log = _Log()
    buffer = _buffer(buffer_type)
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
    buffer, late, log = await _send_a_late_write_then_another()
    assert not buffer.crashed
    assert late.cancelled()
    assert log == ["send table write"]


async def test_faust_s_own_buffer_crashes_on_a_write_whose_transaction_ended():
    buffer, _late, log = await _send_a_late_write_then_another(ProducerBuffer)
    assert buffer.crashed
    assert isinstance(buffer.crash_reason, IllegalOperation)
    assert log == []


# --- the private names the changes rely on -------------------------------------------


def _parameters(function: object) -> list[str]:
    return list(inspect.signature(function).parameters)  # type: ignore[arg-type]


def test_faust_recovery_still_has_what_faust_1_relies_on():
    recovery_class = faust_recovery.Recovery
    assert _parameters(recovery_class._wait) == ["self", "coro", "timeout"]
    assert isinstance(inspect.getattr_static(recovery_class, "signal_recovery_start"), property)
    assert issubclass(RebalanceAgain, Exception)
    loop = inspect.getsource(recovery_class._restart_recovery.fun)  # a mode ServiceTask
    # The wait whose RebalanceAgain the loop swallows, the loop catching what the
    # change raises, and the steps after it that go through `_wait`.
    assert "await self._wait(self.signal_recovery_end.wait())" in loop
    assert "except RebalanceAgain" in loop
    assert "self._seek_offsets" in loop
    assert "self.on_recovery_completed" in loop


def test_faust_and_aiokafka_still_have_what_the_other_changes_rely_on():
    thread = faust_aiokafka.AIOKafkaConsumerThread
    assert _parameters(thread._highwaters) == ["self", "partitions"]
    assert "self._highwaters" in inspect.getsource(thread.highwaters)
    assert callable(thread._ensure_consumer)
    assert callable(AIOKafkaConsumer.end_offsets)
    producer = faust_aiokafka.Producer
    assert _parameters(producer.flush) == ["self"]
    assert "self.buffer.flush()" in inspect.getsource(producer.flush)
    assert _parameters(producer.commit_transactions) == [
        "self", "tid_to_offset_map", "group_id", "start_new_transaction"]
    assert isinstance(inspect.getattr_static(producer, "_trn_locks"), dict)
    assert isinstance(inspect.getattr_static(producer, "_transaction_producers"), dict)
    # A buffered send that raises IllegalOperation is one whose transaction ended
    # (FAUST-5): the only IllegalOperation aiokafka's send raises.
    assert _parameters(ProducerBuffer._send_pending) == ["self", "fut"]
    send = inspect.getsource(AIOKafkaProducer.send)
    assert send.count("IllegalOperation") == 1
    assert 'raise IllegalOperation("Can\'t send messages while not in transaction")' in send


async def test_an_aiokafka_transactional_producer_still_exposes_its_transaction_state():
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1", transactional_id="change-test")
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
    fetching.no_fetch_backoff(types.SimpleNamespace(_fetcher=fetcher))
    assert _fetched_after(fetcher, held) == [other]


async def test_aiokafka_s_own_fetcher_fetches_nothing_from_the_broker_until_it_is_drained():
    held, other = TopicPartition("state", 0), TopicPartition("state", 1)
    fetcher = await _fetcher_holding_records_of(held, other)
    assert _fetched_after(fetcher, held) == []


async def test_the_consumer_thread_s_consumer_has_no_backoff_and_a_short_poll_once_started():
    consumer = types.SimpleNamespace(_fetcher=types.SimpleNamespace(_prefetch_backoff=0.1,
                                                                    _fetch_max_wait_ms=1500))

    class FaustThread:
        async def on_start(self) -> None:  # Faust's own creates and starts the consumer
            self._consumer = consumer

    class Thread(fetching.NoFetchBackoff, fetching.ShortLongPoll, FaustThread):
        pass

    await Thread().on_start()
    assert consumer._fetcher._prefetch_backoff == fetching.FETCH_BACKOFF == 0.0
    assert consumer._fetcher._fetch_max_wait_ms == fetching.FETCH_MAX_WAIT_MS


# --- FAUST-14: no record of a paused partition is taken while no partition is active


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


class _FaustThread:
    """A stand-in for Faust's consumer thread: its own ``_fetch_records``, and the
    consumer it reads the flow of."""

    consumer = types.SimpleNamespace(flow_active=True)
    _fetch_records = faust_aiokafka.AIOKafkaConsumerThread._fetch_records


class _Thread(fetching.ActivePartitionsOnly, _FaustThread):
    pass


def _worker_thread() -> _Thread:
    return _Thread()


async def test_with_no_partition_active_the_consumer_thread_takes_no_record_of_a_paused_one():
    paused = TopicPartition("state", 6)
    _faust_thread, consumer = await _thread_with_records_of(paused, [26, 27, 29])
    active: set[TopicPartition] = set()
    assert await _worker_thread()._fetch_records(consumer, active, timeout=0) == {}
    active.add(paused)  # resumed: its records come from the first one
    assert await _worker_thread()._fetch_records(consumer, active, timeout=0) == {
        paused: [26, 27, 29]}


async def test_faust_s_own_thread_takes_every_prefetched_record_while_no_partition_is_active():
    """aiokafka reads an empty set of partitions as every partition. If this
    fails, it no longer does, and FAUST-14 is moot."""
    paused = TopicPartition("state", 6)
    thread, consumer = await _thread_with_records_of(paused, [26, 27, 29])
    assert await faust_aiokafka.AIOKafkaConsumerThread._fetch_records(
            thread, consumer, set(), timeout=0) == {
        paused: [26, 27, 29]}


def test_the_active_partitions_are_seen_as_they_change_and_never_read_as_all():
    active: set[TopicPartition] = set()
    view = fetching.ActiveOnly(active)
    assert view
    assert TopicPartition("state", 6) not in view
    active.add(TopicPartition("state", 6))
    assert TopicPartition("state", 6) in view


# --- FAUST-9: the consumer thread's long poll holds its other requests back briefly


def _fetch_waits_ms(fetcher: Fetcher) -> list[int]:
    """How long each fetch the fetcher would send now lets the broker wait for records."""
    requests, *_ = fetcher._get_actions_per_node(fetcher._subscriptions.subscription.assignment)
    return [request.build(FetchRequest_v4).max_wait_time for _, request in requests]


async def test_the_consumer_thread_s_fetches_wait_a_tenth_of_a_second_for_records():
    fetcher = await _fetcher_holding_records_of(TopicPartition("state", 0),
                                                TopicPartition("state", 1))
    fetching.short_long_poll(types.SimpleNamespace(_fetcher=fetcher))
    assert _fetch_waits_ms(fetcher) == [fetching.FETCH_MAX_WAIT_MS] == [100]


def test_faust_still_makes_its_worker_consumer_wait_one_and_a_half_seconds():
    """If this fails, Faust has changed how its consumer is made: FAUST-9 may be
    moot, or may now undo a setting of the app's."""
    source = inspect.getsource(faust_aiokafka.AIOKafkaConsumerThread._create_worker_consumer)
    assert "fetch_max_wait_ms=1500" in source


# --- FAUST-10: the table manager starts its recovery at once ---------------------


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
    manager = _StartingTableManager()
    await recovering.TableManagerStartsAtOnce.on_start(manager)
    assert manager.steps == ["tables closed", "recovery started"]


async def test_faust_s_own_table_manager_sleeps_a_second_first():
    manager = _StartingTableManager()
    await faust_tables_manager.TableManager.on_start(manager)
    assert manager.steps == ["slept 1.0 s", "tables closed", "recovery started"]


async def test_a_table_manager_already_stopping_starts_no_recovery():
    stopping = _StartingTableManager(should_stop=True)
    await recovering.TableManagerStartsAtOnce.on_start(stopping)
    assert stopping.steps == []


# --- AIOKAFKA-1: a connection lost during FindCoordinator is retried ---------------


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


def _sender(client, sender_type: type[Sender] = producing.CoordinatorRetrySender) -> Sender:
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
    retries = producing.COORDINATOR_RETRIES
    found = _ResettingClient(resets=retries)
    assert await _sender(found)._find_coordinator(CoordinationType.GROUP, "app") == 1
    assert found.lookups == retries + 1
    lost = _ResettingClient(resets=retries + 1)
    with pytest.raises(KafkaError) as failed:
        await _sender(lost)._find_coordinator(CoordinationType.GROUP, "app")
    assert isinstance(failed.value.__cause__, KafkaConnectionError)
    assert lost.lookups == retries + 1


async def test_aiokafka_s_own_sender_still_lets_a_lost_connection_end_the_lookup():
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
    worker_client = _app("change-test").producer._new_producer(
        transactional_id="change-test-0-0")
    plain_app = faust.App("change-test-plain", broker="kafka://127.0.0.1:1", store="memory://")
    plain_faust_client = plain_app.producer._new_producer(transactional_id="change-test-1-0")
    plain_client = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1")
    try:
        assert isinstance(worker_client, producing.WorkerClientProducer)
        assert type(worker_client._sender) is producing.CoordinatorRetrySender
        assert type(plain_faust_client._sender) is Sender
        assert type(plain_client._sender) is Sender
    finally:
        await worker_client.stop()
        await plain_faust_client.stop()
        await plain_client.stop()


# --- FAUST-12: each record of a stream partition reaches the streams once ----------


def _queued(flow: FlowControlEvent) -> FlowControlQueue:
    """A stream's queue: Faust's channels empty theirs when the flow resumes."""
    return FlowControlQueue(flow_control=flow, clear_on_resume=True)


def _flow() -> FlowControlEvent:
    """The worker's flow control, active."""
    return classes().flow_control(initially_suspended=False)


def test_resuming_a_flow_already_active_keeps_the_events_queued():
    flow = _flow()
    queue = _queued(flow)
    queue.put_nowait("event of offset 5")
    flow.resume()
    assert queue.qsize() == 1


def test_resuming_a_suspended_flow_empties_the_queues_as_before():
    flow = _flow()
    queue = _queued(flow)
    flow.suspend()
    queue.put_nowait("event fetched before a rebalance")
    flow.resume()
    assert queue.empty()
    assert flow.is_active()


def _recovery_at_its_end(app: faust.App, monkeypatch) -> tuple[faust_recovery.Recovery,
                                                                FlowControlQueue]:
    """The recovery of `app`, never started, at the end of a rebalance, whose
    consumer seeks as a fetch hands over a record of the stream partition the
    recovery has just resumed: the fetcher puts it in the stream's queue while the
    seek's OffsetFetch is under way."""
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
        monkeypatch):
    recovery, queue = _recovery_at_its_end(_app("change-test"), monkeypatch)
    await recovery.on_recovery_completed(0)
    assert queue.qsize() == 1


async def test_faust_s_own_flow_control_empties_it_at_the_resume_after_the_seek(monkeypatch):
    """The loss, in miniature: Faust resumes the flow again after the seek, and a
    resume empties the queues even when the flow is active. The consumer has
    counted the record as read, so fetched again from the committed offset it
    is skipped, and the commit after the next record goes past it."""
    plain = faust.App("change-test-plain", broker="kafka://127.0.0.1:1", store="memory://")
    recovery, queue = _recovery_at_its_end(plain, monkeypatch)
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


def _hand_over(flow: FlowControlEvent, conductor: _Conductor, changelog: bool = False):
    """The conductor's callback as the worker's consumer hands records to it."""
    return recovering.handed_once(flow.handed, lambda tp: changelog, conductor)


class _FaustFetchLoop:
    """A stand-in for Faust's consumer: its fetch loop notes the callback it hands
    records to, and its seek notes what was sought."""

    def __init__(self, flow: FlowControlEvent) -> None:
        self.app = types.SimpleNamespace(flow_control=flow)
        self.callback = _Conductor()
        self.handed_to: list[object] = []
        self.sought: list[tuple[object, int]] = []

    def _is_changelog_tp(self, tp: object) -> bool:
        return False

    async def _drain_messages(self, fetcher: object) -> None:
        self.handed_to.append(self.callback)

    async def seek(self, partition: object, offset: int) -> None:
        self.sought.append((partition, offset))


class _FetchLoop(recovering.HandedOnce, _FaustFetchLoop):
    pass


def _message(offset: int, partition: int = 9) -> types.SimpleNamespace:
    return types.SimpleNamespace(tp=faust.types.TP("state", partition), offset=offset)


async def _hand(callback, *offsets: int, partition: int = 9) -> None:
    for offset in offsets:
        await callback(_message(offset, partition))


async def test_a_record_fetched_again_after_a_seek_is_not_handed_over_twice():
    flow = _flow()
    conductor = _Conductor()
    hand_over = _hand_over(flow, conductor)
    await _hand(hand_over, 59, 60)
    await _hand(hand_over, 59, 60, 61)  # from the committed offset, after the seek
    await _hand(hand_over, 59, partition=10)  # another partition's own offsets
    assert conductor.handed == [59, 60, 61, 59]


async def test_once_the_queues_are_emptied_the_records_are_handed_over_again():
    flow = _flow()
    conductor = _Conductor()
    hand_over = _hand_over(flow, conductor)
    await _hand(hand_over, 59, 60)
    flow.suspend()
    flow.clear()  # a rebalance: the queued events are gone
    await _hand(hand_over, 59, 60)
    assert conductor.handed == [59, 60, 59, 60]


async def test_a_hand_over_the_queues_were_emptied_during_does_not_count():
    flow = _flow()
    conductor = _Conductor()
    conductor.gate = asyncio.Event()
    hand_over = _hand_over(flow, conductor)
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
    flow = _flow()
    conductor = _Conductor()
    hand_over = _hand_over(flow, conductor, changelog=True)
    await _hand(hand_over, 5, 6)
    await _hand(hand_over, 5, 6)  # the table recovery sought back
    assert conductor.handed == [5, 6, 5, 6]


async def test_a_partition_sought_is_handed_over_again_from_its_new_offset():
    flow = _flow()
    conductor = _Conductor()
    consumer = _FetchLoop(flow)
    hand_over = _hand_over(flow, conductor)
    await _hand(hand_over, 59, 60)
    await consumer.seek(faust.types.TP("state", 9), 59)
    await _hand(hand_over, 59, 60)
    assert conductor.handed == [59, 60, 59, 60]
    assert consumer.sought == [(faust.types.TP("state", 9), 59)]


async def test_the_fetch_loop_hands_its_records_over_through_the_once_only_callback():
    consumer = _FetchLoop(_flow())
    conductor = consumer.callback
    await consumer._drain_messages(None)
    await consumer._drain_messages(None)  # the fetcher restarted
    seen = consumer.handed_to
    assert seen[0] is seen[1] is not conductor
    assert seen[0].handed_once


def test_the_worker_s_consumer_hands_its_records_over_once():
    assert recovering.HandedOnce in type(_app("change-test").consumer).__mro__


# --- FAUST-13: a recovery never ends a partition at a position it has not sought -----


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
    await recovery._build_highwaters(reader, {CHANGELOG}, recovery.active_highwaters, "active")
    recovery.active_offsets[CHANGELOG] = -1
    return reader


async def test_before_the_recovery_seeks_a_partition_its_position_is_where_it_will_read_from(
        consumer):
    """The consumer says 100: where a fetch the recovery never saw left it."""
    recovery = consumer.app.tables.recovery
    reader = await _recovery_round_begun(recovery)
    assert recovery.active_highwaters[CHANGELOG] == 14
    assert await consumer.position(CHANGELOG) == -1
    await recovery._seek_offsets(reader, {CHANGELOG}, recovery.active_offsets, "active")
    assert reader.sought == {CHANGELOG: 0}
    assert await consumer.position(CHANGELOG) == 100


async def _aborted_after_two_idle_polls(app: faust.App, monkeypatch) -> int:
    """Run Faust's own changelog loop on an empty queue until it has asked the
    position of partition 9 twice or ended the partition as "aborted
    transactions", and give the offset it then holds for it (14 if ended)."""
    asked: list[object] = []
    consumer = app.consumer
    own_position = consumer.position

    async def position(tp: object) -> int | None:
        asked.append(tp)
        return await own_position(tp)

    async def stale(tp: object) -> int:
        return 15  # a fetch that went past the partition's records, which the recovery never got

    monkeypatch.setattr(consumer, "_thread", types.SimpleNamespace(position=stale))
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
    """What FAUST-13 relies on: a recovery round's first step for the active
    partitions is their high watermarks (titled "active"), and its seek comes after."""
    loop = inspect.getsource(faust_recovery.Recovery._restart_recovery.fun)
    first = loop.index("self._build_highwaters")
    assert '"active"' in loop[first:loop.index(")", loop.index("active_highwaters", first))]
    assert loop.index("self._seek_offsets") > first
    assert _parameters(faust_recovery.Recovery._build_highwaters) == [
        "self", "consumer", "tps", "destination", "title"]
    assert _parameters(faust_recovery.Recovery._seek_offsets) == [
        "self", "consumer", "tps", "offsets", "title"]


def _exactly_once_app(app_type: type[faust.App] = ChangedApp) -> faust.App:
    app = app_type("change-test-abort", broker="kafka://127.0.0.1:1", store="memory://",
                   processing_guarantee="exactly_once")
    app.in_worker = True  # Faust uses transactions only in a worker
    assert app.in_transaction
    return app


async def test_a_recovery_does_not_end_a_partition_it_has_not_sought_yet(monkeypatch):
    app = _exactly_once_app()
    await _recovery_round_begun(app.tables.recovery)
    assert await _aborted_after_two_idle_polls(app, monkeypatch) == -1


async def test_faust_s_own_recovery_ends_it_as_aborted_transactions_and_reads_none_of_it(
        monkeypatch):
    """The loss, in miniature: Faust's changelog loop, idle between two steps of a
    recovery, compares the consumer's position with the high watermark before the
    recovery has sought the partition, finds it past, and marks the partition read:
    the table keeps none of its values."""
    app = _exactly_once_app(faust.App)
    # Idle polls of 0.25 s, not Faust's 5 s, so the test is quick (FAUST-2 alone).
    app.tables._changelog_queue = recovering.RecoveryQueue(flow_control=app.flow_control)
    recovery = app.tables.recovery
    recovery.active_highwaters[CHANGELOG] = 14
    recovery.active_offsets[CHANGELOG] = -1
    assert await _aborted_after_two_idle_polls(app, monkeypatch) == 14


# --- FAUST-18: a transactional partition's commit reaches the offset after its last record


async def _hand_over_and_ack(consumer, tp, offsets: list[int]) -> None:
    """What Faust's fetch loop and the fold do per record: a gap for the offsets
    skipped before it (``_drain_messages``), then the record's acknowledgement."""
    read = None
    for offset in offsets:
        if read is not None and offset - read > 1:
            await consumer._add_gap(tp, read + 1, offset)
        consumer._acked[tp].append(offset)
        consumer._acked_index[tp].add(offset)
        read = offset


async def test_a_commit_of_a_transactional_partition_reaches_the_offset_after_its_last_record():
    """Each record its own transaction: records at even offsets, commit markers at
    odd ones. The gap Faust noted before a record covered the record too, so its
    offset was acked twice and a commit stopped at the first repeat: two offsets,
    one record, per partition per commit interval."""
    consumer = _app("change-test-gaps").consumer
    tp = TP("state", 0)
    await _hand_over_and_ack(consumer, tp, list(range(0, 20, 2)))
    assert consumer._new_offset(tp) == 19


async def test_a_commit_after_a_gap_at_the_head_waits_for_nothing_already_acked():
    consumer = _app("change-test-gaps-committed").consumer
    tp = TP("state", 0)
    consumer._committed_offset[tp] = 5
    await _hand_over_and_ack(consumer, tp, [5, 6, 9, 10, 12])
    assert consumer._new_offset(tp) == 13


def test_faust_still_passes_the_record_s_own_offset_as_its_gap_s_end():
    source = inspect.getsource(faust_consumer.Consumer._drain_messages)
    assert "await self._add_gap(tp, r_offset + 1, offset)" in source
    gap = inspect.getsource(faust_consumer.Consumer._add_gap)
    assert "gap_for_tp.addi(offset_from, offset_to + 1)" in gap


# --- FAUST-19: a gap is noted without rebuilding the partition's gap tree ---------------


def _counting_merges(monkeypatch) -> list[int]:
    """Every ``IntervalTree.merge_overlaps`` call from now on, counted (Faust's gap tree
    rebuilds itself in it)."""
    from intervaltree import IntervalTree

    merges: list[int] = []
    merge = IntervalTree.merge_overlaps

    def counted(self, *args, **kwargs):
        merges.append(len(self))
        return merge(self, *args, **kwargs)

    monkeypatch.setattr(IntervalTree, "merge_overlaps", counted)
    return merges


async def test_noting_a_gap_neither_yields_nor_rebuilds_the_gap_tree(monkeypatch):
    """The fetch loop notes a gap before every record of a partition written one
    transaction per record: each costs an append, not a turn of the event loop and
    a rebuild of every gap since the last commit."""
    merges = _counting_merges(monkeypatch)
    consumer = _app("change-test-gaps-bulk").consumer
    tp = TP("state", 0)
    for offset in range(2, 2000, 2):
        noting = consumer._add_gap(tp, offset - 1, offset)
        with pytest.raises(StopIteration):  # done at its first step: it never suspends
            noting.send(None)
    assert merges == []


async def test_the_gaps_a_commit_passes_join_the_acked_offsets_without_a_tree(monkeypatch):
    merges = _counting_merges(monkeypatch)
    consumer = _app("change-test-gaps-once").consumer
    tp = TP("state", 0)
    await _hand_over_and_ack(consumer, tp, list(range(0, 400, 2)))
    assert consumer._new_offset(tp) == 399
    assert merges == []
    assert not consumer._gap[tp]


async def test_a_gap_before_a_record_not_yet_acked_waits_for_the_record():
    consumer = _app("change-test-gaps-later").consumer
    tp = TP("state", 0)
    await _hand_over_and_ack(consumer, tp, [0, 2, 4])
    await consumer._add_gap(tp, 5, 6)  # record 6 fetched, its gap noted, not acked yet
    assert consumer._new_offset(tp) == 5
    consumer._acked[tp].append(6)
    consumer._acked_index[tp].add(6)
    assert consumer._new_offset(tp) == 7


async def test_a_revoked_partition_s_noted_gaps_are_forgotten_with_it():
    consumer = _app("change-test-gaps-revoked").consumer
    tp = TP("state", 0)
    await _hand_over_and_ack(consumer, tp, [0, 2, 4])
    await consumer.on_partitions_revoked({tp})
    consumer._committed_offset[tp] = 10
    await _hand_over_and_ack(consumer, tp, [10, 11])
    assert consumer._new_offset(tp) == 12


def test_faust_still_rebuilds_the_gap_tree_at_every_gap_and_reads_it_only_to_commit():
    gap = inspect.getsource(faust_consumer.Consumer._add_gap)
    assert "await asyncio.sleep(0)" in gap
    assert "gap_for_tp.merge_overlaps()" in gap
    source = inspect.getsource(faust_consumer)
    assert source.count("self._gap[") == 2  # `_new_offset` reads it, `_add_gap` adds to it
    new_offset = inspect.getsource(faust_consumer.Consumer._new_offset)
    # The tree's intervals below the highest acked offset join the acked offsets.
    assert "candidates = gap_for_tp.overlap(0, max_offset)" in new_offset
    assert "acked.extend(stuff_to_add)" in new_offset

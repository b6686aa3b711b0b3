"""What the core retries and what ends a tenure, a campaign or a runner at once.

Only a `TransportError` is an outage: a tenure retries it until its fence
deadline and the runner campaigns again after it. Any other error a transport
raises is a bug and is never waited out: it ends the tenure at once with the
error in `err`, propagates from `acquire_leadership`, and stops the runner,
whose task raises it. An observer's own bug is logged and changes nothing.
Both transports raise the same types for the same conditions.
"""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

import pytest
from aiokafka import errors as kafka_errors

from krabka import (
    FencedError,
    InvalidStateError,
    KafkaTransport,
    KafkaTransportError,
    LeaderRunner,
    Leadership,
    LeadershipOptions,
    RunnerObserver,
    RunnerState,
    TenureState,
    TransportError,
    describe_role_state,
)
from krabka.kafka.consumer.tail import KafkaTail
from krabka.kafka.producer.fenced import RoleProducer
from krabka.tenure import TOPIC_RECHECK_MS
from krabka.testing import MemoryBroker, MemoryTransport
from tests.support.sim import LEASE, RENEW, STAGGER, STATE, Cluster

ROLE = "billing"
OPTIONS = LeadershipOptions(partitions=4, lease_duration=LEASE, renew_interval=RENEW,
                            challenge_stagger=STAGGER)
RENEW_MS = round(RENEW * 1000)


class BreakableTransport(MemoryTransport):
    """A client whose calls named in `broken` raise the error given for them."""

    def __init__(self, broker: MemoryBroker) -> None:
        super().__init__(broker)
        self.broken: dict[str, BaseException] = {}

    def _call(self, name: str) -> None:
        error = self.broken.get(name)
        if error is not None:
            raise error

    async def acquire_epoch(self, role, transaction_timeout, current=None):
        self._call("acquire_epoch")
        return await super().acquire_epoch(role, transaction_timeout, current)

    async def read_partition(self, partition, from_offset=0):
        self._call("read_partition")
        return await super().read_partition(partition, from_offset)

    async def tail(self, partition, from_offset, *, role=None):
        self._call("tail")
        return await super().tail(partition, from_offset, role=role)

    async def check_topic(self, partitions, lease_duration):
        self._call("check_topic")
        return await super().check_topic(partitions, lease_duration)

    async def append(self, partition, key, value):
        self._call("append")
        return await super().append(partition, key, value)

    async def begin_transaction(self, role, token):
        self._call("begin_transaction")
        return await super().begin_transaction(role, token)


async def lead(cluster: Cluster, transport: MemoryTransport) -> Leadership:
    task = cluster.candidate("a", transport=transport)
    await cluster.until(task.done, within=1)
    return task.result()


# The tenure.


async def test_a_type_error_on_a_renewal_ends_the_tenure_within_one_renew_interval():
    cluster = Cluster()
    transport = BreakableTransport(cluster.broker)
    leadership = await lead(cluster, transport)
    bug = TypeError("write_lease() got an unexpected keyword argument")
    transport.broken["begin_transaction"] = bug
    broken_at = cluster.clock.monotonic_ms()
    await cluster.until(leadership.done.done, within=RENEW, step_ms=5)
    assert cluster.clock.monotonic_ms() - broken_at <= RENEW_MS
    assert leadership.err is bug
    assert leadership.state is TenureState.ENDED
    assert cluster.clock.monotonic_ms() < leadership.fence_deadline_monotonic
    await leadership.resign()
    assert transport._producers == {}


async def test_a_transport_error_on_renewals_is_retried_until_the_fence_deadline():
    cluster = Cluster()
    transport = BreakableTransport(cluster.broker)
    leadership = await lead(cluster, transport)
    transport.broken["begin_transaction"] = TransportError("broker unreachable")
    deadline = leadership.fence_deadline_monotonic
    await cluster.until(leadership.done.done, within=LEASE, step_ms=5)
    assert deadline <= cluster.clock.monotonic_ms() <= deadline + 5
    assert isinstance(leadership.err, FencedError)
    assert "fence deadline" in str(leadership.err)


async def test_a_renewal_retried_after_a_transport_error_keeps_the_tenure():
    cluster = Cluster()
    transport = BreakableTransport(cluster.broker)
    leadership = await lead(cluster, transport)
    first = leadership.lease
    transport.broken["begin_transaction"] = TransportError("broker unreachable")
    await cluster.advance(RENEW * 1.5)
    assert leadership.lease == first  # the renewal failed and is being retried
    del transport.broken["begin_transaction"]
    await cluster.advance(0.5)
    assert leadership.lease.deadline > first.deadline
    assert leadership.state is TenureState.LEADING
    await leadership.resign()


async def test_a_type_error_from_the_topic_re_check_ends_the_tenure():
    cluster = Cluster()
    transport = BreakableTransport(cluster.broker)
    leadership = await lead(cluster, transport)
    bug = AttributeError("'NoneType' object has no attribute 'partitions'")
    transport.broken["check_topic"] = bug
    await cluster.until(leadership.done.done, within=TOPIC_RECHECK_MS / 1000 + 1, step_ms=100)
    assert leadership.err is bug


async def test_a_transport_error_from_the_topic_re_check_only_postpones_it():
    cluster = Cluster()
    transport = BreakableTransport(cluster.broker)
    leadership = await lead(cluster, transport)
    transport.broken["check_topic"] = TransportError("broker unreachable")
    await cluster.advance(TOPIC_RECHECK_MS / 1000 + 1, step_ms=100)
    assert leadership.state is TenureState.LEADING
    await leadership.resign()


async def test_a_type_error_from_the_begin_of_a_guarded_transaction_ends_the_tenure():
    cluster = Cluster()
    transport = BreakableTransport(cluster.broker)
    leadership = await lead(cluster, transport)
    bug = TypeError("begin_transaction() takes 2 positional arguments")
    transport.broken["begin_transaction"] = bug
    with pytest.raises(TypeError):
        async with leadership.transaction():
            pass
    assert leadership.err is bug
    assert leadership.fenced()


async def test_a_transport_error_from_the_begin_of_a_guarded_transaction_keeps_the_tenure():
    cluster = Cluster()
    transport = BreakableTransport(cluster.broker)
    leadership = await lead(cluster, transport)
    transport.broken["begin_transaction"] = TransportError("broker unreachable")
    with pytest.raises(TransportError):
        async with leadership.transaction():
            pass
    assert leadership.state is TenureState.LEADING
    del transport.broken["begin_transaction"]
    await leadership.resign()


async def test_a_failing_renewal_observer_is_logged_and_the_tenure_goes_on(caplog):
    cluster = Cluster()
    leadership = await lead(cluster, cluster.transport())

    def observer(_lease, _latency):
        raise TypeError("the observer's own bug")

    leadership.on_renewed = observer
    with caplog.at_level(logging.ERROR, logger="krabka.runtime.callbacks"):
        await cluster.advance(RENEW * 3)
    assert leadership.state is TenureState.LEADING
    assert "the renewal observer failed" in caplog.text
    await leadership.resign()


# The candidate.

CANDIDATE_CALLS = ["read_partition", "tail", "check_topic", "append", "acquire_epoch",
                   "begin_transaction"]


@pytest.mark.parametrize("call", CANDIDATE_CALLS)
async def test_a_type_error_in_a_candidate_call_propagates_at_once_leaving_nothing(call):
    cluster = Cluster()
    transport = BreakableTransport(cluster.broker)
    bug = TypeError(f"{call}: a bug")
    transport.broken[call] = bug
    task = cluster.candidate("a", transport=transport)
    await cluster.until(task.done, within=0)  # no clock time passes
    assert task.exception() is bug
    assert transport._producers == {}
    state = await describe_role_state(cluster.transport(), ROLE, cluster.partitions)
    assert state.lease is None


# The runner.


class Recorder(RunnerObserver):
    def __init__(self) -> None:
        self.campaign_errors: list[BaseException] = []

    def campaign_failed(self, role: str, error: BaseException) -> None:
        self.campaign_errors.append(error)


async def idle(_leadership: Leadership) -> None:
    await asyncio.Event().wait()


def runner_on(cluster: Cluster, transport: MemoryTransport, observer: RunnerObserver
              ) -> LeaderRunner:
    return LeaderRunner(transport, ROLE, "a", idle, options=OPTIONS, clock=cluster.clock,
                        observer=observer, retry_interval=0.1)


def runner_with_broken(call: str, error: BaseException
                       ) -> tuple[Cluster, BreakableTransport, Recorder, LeaderRunner]:
    """A runner (not started) whose transport's `call` raises `error`."""
    cluster = Cluster()
    transport = BreakableTransport(cluster.broker)
    transport.broken[call] = error
    recorder = Recorder()
    return cluster, transport, recorder, runner_on(cluster, transport, recorder)


async def test_the_runner_campaigns_again_after_a_transport_error():
    cluster, transport, recorder, runner = runner_with_broken(
        "append", TransportError("broker unreachable"))
    task = runner.start()
    try:
        await cluster.until(lambda: len(recorder.campaign_errors) >= 2, within=2)
        assert not task.done()
        del transport.broken["append"]
        await cluster.until(lambda: runner.running, within=2)
    finally:
        await cluster.stop_runners(runner)


async def test_a_runner_stopped_while_backing_off_removes_its_registration():
    cluster, _, _, runner = runner_with_broken(
        "acquire_epoch", TransportError("coordinator unreachable"))
    runner.start()
    await cluster.until(lambda: runner.state is RunnerState.BACKING_OFF, within=2)
    state = await describe_role_state(cluster.transport(), ROLE, OPTIONS.partitions)
    assert state.roster == ["a"]
    await cluster.stop_runners(runner)
    state = await describe_role_state(cluster.transport(), ROLE, OPTIONS.partitions)
    assert state.roster == []


async def test_the_runner_stops_and_raises_a_bug_of_a_campaign():
    bug = TypeError("append() missing 1 required positional argument")
    cluster, _, recorder, runner = runner_with_broken("append", bug)
    task = runner.start()
    await cluster.until(task.done, within=1)
    assert task.exception() is bug
    assert runner.state is RunnerState.STOPPED
    assert recorder.campaign_errors == []


async def test_the_runner_stops_the_function_and_raises_a_bug_that_ended_its_tenure():
    cluster = Cluster()
    transport = BreakableTransport(cluster.broker)
    runner = runner_on(cluster, transport, Recorder())
    task = runner.start()
    await cluster.until(lambda: runner.running, within=2)
    bug = TypeError("a renewal's bug")
    transport.broken["begin_transaction"] = bug
    await cluster.until(task.done, within=RENEW + OPTIONS.renew_interval)
    assert task.exception() is bug
    assert not runner.running
    assert runner.last_stop is not None
    assert runner.last_stop.reason == "fenced"
    assert runner.state is RunnerState.STOPPED
    assert transport._producers == {}


# The same types from both transports.


async def test_memory_a_partition_the_broker_does_not_have_is_a_transport_error():
    cluster = Cluster()
    with pytest.raises(TransportError, match="UNKNOWN_TOPIC_OR_PARTITION"):
        await cluster.transport().read_partition(cluster.partitions)
    with pytest.raises(TransportError, match="UNKNOWN_TOPIC_OR_PARTITION"):
        await MemoryTransport(MemoryBroker(), topic="missing").append(0, b"k", b"v")


async def test_memory_a_second_open_transaction_and_a_commit_after_the_end_are_invalid_state():
    transport = Cluster().transport()
    token = await transport.acquire_epoch(ROLE, LEASE)
    txn = await transport.begin_transaction(ROLE, token)
    with pytest.raises(InvalidStateError, match="already open"):
        await transport.begin_transaction(ROLE, token)
    await txn.commit()
    with pytest.raises(InvalidStateError, match="already ended"):
        await txn.commit()
    await txn.abort()  # a no-op once ended, as on KafkaTransport
    with pytest.raises(InvalidStateError, match="already ended"):
        await txn.send("out", b"late", partition=0)
    assert STATE in transport.broker.topics


async def test_kafka_a_closed_transport_refuses_calls_with_invalid_state():
    transport = KafkaTransport("127.0.0.1:1")
    await transport.close()
    with pytest.raises(InvalidStateError, match="closed"):
        await transport.read_partition(0)


def fake_role_producer() -> RoleProducer:
    manager = SimpleNamespace(producer_id=7, producer_epoch=0, is_fatal_error=lambda: False)
    return RoleProducer(ROLE, SimpleNamespace(_txn_manager=manager), STATE, 5.0,
                        lambda _owner, _error: None)


async def raising(error: BaseException) -> None:
    raise error


async def test_kafka_a_bug_inside_a_fenced_producer_call_propagates_unchanged():
    bug = TypeError("send() got an unexpected keyword argument")
    with pytest.raises(TypeError) as caught:
        await fake_role_producer().call(raising(bug), "a lease write")
    assert caught.value is bug


async def test_kafka_a_kafka_failure_inside_a_fenced_producer_call_is_a_transport_error():
    with pytest.raises(KafkaTransportError) as caught:
        await fake_role_producer().call(
            raising(kafka_errors.KafkaConnectionError("connection reset")), "a lease write")
    assert isinstance(caught.value, TransportError)


async def test_kafka_a_tail_ended_by_a_bug_raises_the_bug_and_by_a_fetch_error_a_transport_error():
    bug = TypeError("a bug in the fetch loop")
    broken = KafkaTail(SimpleNamespace(), "state", 0, 0)  # type: ignore[arg-type]
    broken._fail(bug)
    with pytest.raises(TypeError) as caught:
        await broken.next()
    assert caught.value is bug
    failed = KafkaTail(SimpleNamespace(), "state", 0, 0)  # type: ignore[arg-type]
    failed._fail(kafka_errors.KafkaConnectionError("connection reset"))
    with pytest.raises(KafkaTransportError):
        await failed.next()

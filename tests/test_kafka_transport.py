"""KafkaTransport on a real broker: each rule of docs/design.md#the-kafka-adapter, one per test.

Every test gets a fresh compacted state topic with a unique name. Two
transports on one broker are two processes: each has its own producers, so
they can fence each other. Waits poll with a deadline; nothing sleeps a
fixed time.
"""

from __future__ import annotations

import asyncio
import re
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

import coordination.kafka.transport as kafka_transport_module
from coordination import (
    NO_EPOCH,
    FencedError,
    FencingToken,
    Lease,
    Registration,
    StateTopicError,
    acquire_leadership,
    describe_leadership,
    encode_key,
    encode_lease,
    encode_registration,
    lease_key,
    registration_key,
    role_partition,
)
from coordination.kafka import KafkaTransport, KafkaUnavailableError
from coordination.kafka.options import ClientOptions
from coordination.transport import PartitionRead, TopicCheck
from tests import polling
from tests.kafka_io import committed_values
from tests.loop import run_ready_callbacks

pytestmark = pytest.mark.integration

PARTITIONS = 4
LEASE = 3.0
TXN_TIMEOUT = 2.0
DEADLINE = 30.0

T = TypeVar("T")


# ------------------------------------------------------------------- fixtures


@pytest.fixture
async def admin(kafka_bootstrap: str) -> AsyncIterator[AIOKafkaAdminClient]:
    client = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await client.start()
    yield client
    await client.close()


@pytest.fixture
def new_topic(admin: AIOKafkaAdminClient) -> Callable[..., Awaitable[str]]:
    """Create a topic with a unique name (compacted unless told otherwise)."""

    async def create(partitions: int = PARTITIONS, *, compacted: bool = True) -> str:
        name = f"kt-{uuid.uuid4().hex[:10]}"
        configs = {"cleanup.policy": "compact", "segment.ms": "600000"} if compacted else {}
        response = await admin.create_topics(
            [NewTopic(name, partitions, 1, topic_configs=configs)])
        assert [error for _, error, _ in response.topic_errors] == [0]
        return name

    return create


@pytest.fixture
async def state_topic(new_topic: Callable[..., Awaitable[str]]) -> str:
    return await new_topic()


@pytest.fixture
async def transports(
    kafka_bootstrap: str, state_topic: str
) -> AsyncIterator[Callable[..., Awaitable[KafkaTransport]]]:
    """Open transports (processes) on the state topic; all closed at the end."""
    opened: list[KafkaTransport] = []

    async def open_transport(**options: Any) -> KafkaTransport:
        transport = KafkaTransport(kafka_bootstrap, topic=state_topic, **options)
        await transport.__aenter__()
        opened.append(transport)
        return transport

    yield open_transport
    for transport in opened:
        await transport.close()


@pytest.fixture
async def transport(transports: Callable[..., Awaitable[KafkaTransport]]) -> KafkaTransport:
    return await transports()


@pytest.fixture
def role() -> str:
    return f"test.kt-{uuid.uuid4().hex[:8]}"


# -------------------------------------------------------------------- helpers


def lease_record(role: str, token: FencingToken, member: str = "a") -> tuple[bytes, bytes]:
    lease = Lease(member, token.producer_id, token.producer_epoch, 1, 2)
    return encode_key(lease_key(role)), encode_lease(lease)


def registration_record(role: str, member: str) -> tuple[bytes, bytes]:
    return (encode_key(registration_key(role, member)),
            encode_registration(Registration(member, 1)))


async def eventually(probe: Callable[[], Awaitable[T]], done: Callable[[T], bool],
                     within: float = DEADLINE) -> T:
    """Poll `probe` until `done(result)`, failing after `within` seconds."""
    return await polling.eventually(probe, done, within)


async def stable_read(transport: KafkaTransport, partition: int) -> PartitionRead:
    """A read once every commit marker is written (stable offset = high watermark)."""
    return await eventually(lambda: transport.read_partition(partition),
                            lambda read: read.last_stable_offset == read.high_watermark)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# ---------------------------------------------------------------- Coordinator


async def test_the_first_acquire_mints_epoch_0_and_the_next_bumps_it(transport, role):
    first = await transport.acquire_epoch(role, LEASE)
    second = await transport.acquire_epoch(role, LEASE)
    assert first.producer_epoch == 0
    assert second == FencingToken(first.producer_id, 1)


async def test_a_lease_write_of_a_superseded_producer_is_fenced(transports, role):
    old, new = await transports(), await transports()
    token = await old.acquire_epoch(role, LEASE)
    await new.acquire_epoch(role, LEASE)
    with pytest.raises(FencedError):
        await old.write_lease(role, token, 0, *lease_record(role, token))
    with pytest.raises(FencedError):  # the fenced producer is gone for good
        await old.write_lease(role, token, 0, *lease_record(role, token))


async def test_describe_epoch_reports_the_producers_token(transport, role):
    token = await transport.acquire_epoch(role, LEASE)
    status = await transport.describe_epoch(role)
    assert status.token == token
    assert status.state == "Empty"
    assert status.authoritative(token)


async def test_a_role_never_taken_describes_as_no_epoch(transport, role):
    status = await transport.describe_epoch(role)
    assert (status.token, status.state) == (NO_EPOCH, "Unknown")


async def test_a_conditional_bump_with_the_current_token_bumps(transport, role):
    token = await transport.acquire_epoch(role, LEASE)
    bumped = await transport.acquire_epoch(role, LEASE, current=token)
    assert bumped == FencingToken(token.producer_id, token.producer_epoch + 1)
    assert (await transport.describe_epoch(role)).token == bumped
    with pytest.raises(FencedError):  # the resigned token cannot write any more
        await transport.write_lease(role, token, 0, *lease_record(role, token))


async def test_a_conditional_bump_moves_the_producer_to_the_new_epoch(transport, role):
    """The producer that held the bumped token writes on under the new one:
    several transactions, so the idempotent sequence numbers restart too."""
    token = await transport.acquire_epoch(role, LEASE)
    await transport.write_lease(role, token, 0, *lease_record(role, token))
    bumped = await transport.acquire_epoch(role, LEASE, current=token)
    offsets = [await transport.write_lease(role, bumped, 0, *lease_record(role, bumped))
               for _ in range(3)]
    assert offsets == sorted(offsets)
    read = await stable_read(transport, 0)
    assert read.records[-1].offset == offsets[-1]
    assert (await transport.describe_epoch(role)).token == bumped
    await transport.release(role, bumped)


async def test_a_conditional_bump_with_a_stale_token_is_fenced_and_bumps_nothing(
    transports, role
):
    old, new = await transports(), await transports()
    stale = await old.acquire_epoch(role, LEASE)
    successor = await new.acquire_epoch(role, LEASE)
    with pytest.raises(FencedError):
        await old.acquire_epoch(role, LEASE, current=stale)
    assert (await new.describe_epoch(role)).token == successor
    # the successor still writes
    await new.write_lease(role, successor, 0, *lease_record(role, successor))


async def test_a_conditional_bump_with_a_stale_epoch_aborts_the_current_epochs_open_transaction(
    transports, role, new_topic
):
    """Kafka checks only the producer id of a conditional InitProducerId
    before it aborts an ongoing transaction: a stale epoch fences the current
    one if its transaction is open. Leadership.resign therefore asks first."""
    output = await new_topic(1, compacted=False)
    old, new = await transports(), await transports()
    stale = await old.acquire_epoch(role, LEASE)
    successor = await new.acquire_epoch(role, LEASE)
    txn = await new.begin_transaction(role, successor)
    await txn.send(output, b"successor", partition=0)
    with pytest.raises(FencedError):
        await old.acquire_epoch(role, LEASE, current=stale)
    assert (await new.describe_epoch(role)).token == FencingToken(
        successor.producer_id, successor.producer_epoch + 1)
    with pytest.raises(FencedError):
        await txn.commit()


# ----------------------------------------------------------------- StateReader


async def test_read_partition_of_an_empty_partition_is_empty(transport):
    assert await transport.read_partition(0) == PartitionRead([], 0, 0)


async def test_read_partition_returns_committed_records_in_offset_order(transport, role):
    token = await transport.acquire_epoch(role, LEASE)
    offsets = [await transport.append(1, *registration_record(role, "a")),
               await transport.write_lease(role, token, 1, *lease_record(role, token)),
               await transport.append(1, *registration_record(role, "b")),
               await transport.write_lease(role, token, 1, *lease_record(role, token, "b"))]
    read = await stable_read(transport, 1)
    assert [r.offset for r in read.records] == offsets
    assert [r.key for r in read.records] == [
        registration_record(role, "a")[0], lease_record(role, token)[0],
        registration_record(role, "b")[0], lease_record(role, token)[0]]
    assert all(r.timestamp > 0 for r in read.records)


async def test_read_partition_hides_aborted_records(transport, role):
    token = await transport.acquire_epoch(role, LEASE)
    txn = await transport.begin_transaction(role, token)
    aborted = await txn.write_lease(0, *lease_record(role, token, "aborted"))
    await txn.abort()
    committed = await transport.write_lease(role, token, 0, *lease_record(role, token, "committed"))
    read = await stable_read(transport, 0)
    assert [r.offset for r in read.records] == [committed]
    assert aborted < committed


async def test_read_partition_stops_at_an_open_transaction(transport, role):
    token = await transport.acquire_epoch(role, LEASE)
    before = await transport.append(0, *registration_record(role, "a"))
    txn = await transport.begin_transaction(role, token)
    open_at = await txn.write_lease(0, *lease_record(role, token))
    try:
        read = await transport.read_partition(0)
        assert [r.offset for r in read.records] == [before]
        assert read.last_stable_offset == open_at < read.high_watermark
    finally:
        await txn.abort()


async def test_tail_returns_a_newly_committed_record_within_a_fetch_round_trip(
    transport, role
):
    token = await transport.acquire_epoch(role, LEASE)
    start = await stable_read(transport, 2)
    tail = await transport.tail(2, start.last_stable_offset)
    try:
        waiting = asyncio.ensure_future(tail.next())
        offset = await transport.write_lease(role, token, 2, *lease_record(role, token))
        committed_at = time.monotonic()
        seen: list[int] = []
        while offset not in seen:
            read = await asyncio.wait_for(waiting, DEADLINE)
            seen += [r.offset for r in read.records]
            waiting = asyncio.ensure_future(tail.next())
        waiting.cancel()
        assert seen == [offset]
        assert time.monotonic() - committed_at < 1.0
    finally:
        await tail.close()


async def test_tail_reports_a_transaction_opening_as_a_stable_offset_below_the_watermark(
    transport, role
):
    token = await transport.acquire_epoch(role, LEASE)
    start = await stable_read(transport, 1)
    tail = await transport.tail(1, start.last_stable_offset)
    txn = await transport.begin_transaction(role, token)
    try:
        open_at = await txn.write_lease(1, *lease_record(role, token))
        read = await asyncio.wait_for(tail.next(), DEADLINE)
        while read.high_watermark <= open_at:
            read = await asyncio.wait_for(tail.next(), DEADLINE)
        assert read.records == []
        assert read.last_stable_offset == open_at < read.high_watermark
    finally:
        await txn.abort()
        await tail.close()


async def test_cancelling_tail_next_loses_no_record(transport, role):
    token = await transport.acquire_epoch(role, LEASE)
    tail = await transport.tail(3, 0)
    written = [await transport.write_lease(role, token, 3, *lease_record(role, token, f"m{i}"))
               for i in range(20)]
    seen: list[int] = []
    deadline = time.monotonic() + DEADLINE
    try:
        while seen != written:
            assert time.monotonic() < deadline, f"saw {seen}, wrote {written}"
            # Cancelled again and again, often while records are queued.
            try:
                read = await asyncio.wait_for(tail.next(), 0.002)
            except TimeoutError:
                continue
            seen += [r.offset for r in read.records]
    finally:
        await tail.close()
    assert seen == written


async def test_tails_of_many_roles_share_one_consumer(transports, role, monkeypatch):
    started: list[Any] = []

    class CountingConsumer(AIOKafkaConsumer):  # type: ignore[misc]
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            started.append(self)

    monkeypatch.setattr(kafka_transport_module, "AIOKafkaConsumer", CountingConsumer)
    transport = await transports()
    roles = [f"{role}-{i}" for i in range(40)]
    tails = {r: await transport.tail(role_partition(r, PARTITIONS), 0) for r in roles}
    try:
        offsets = {r: await transport.append(role_partition(r, PARTITIONS),
                                             *registration_record(r, "a")) for r in roles}
        for r, tail in tails.items():
            mine = (registration_record(r, "a")[0], offsets[r])
            seen: list[tuple[bytes, int]] = []
            while mine not in seen:
                read = await asyncio.wait_for(tail.next(), DEADLINE)
                seen += [(rec.key, rec.offset) for rec in read.records]
        assert len(started) == 1
    finally:
        for tail in tails.values():
            await tail.close()


# --------------------------------------------------------------- LeaseWriter


async def test_200_renewals_keep_the_token_on_a_transaction_version_2_cluster(
    transport, role
):
    features = await transport.api_versions()
    assert features.finalized_level("transaction.version") >= 2
    token = await transport.acquire_epoch(role, LEASE)
    for _ in range(200):
        await transport.write_lease(role, token, 0, *lease_record(role, token))
    status = await transport.describe_epoch(role)
    assert status.token == token
    assert status.state in ("CompleteCommit", "PrepareCommit")


async def test_a_transaction_open_past_its_timeout_is_fenced(kafka_bootstrap, transport, role,
                                                             new_topic):
    output = await new_topic(1, compacted=False)
    token = await transport.acquire_epoch(role, TXN_TIMEOUT)
    txn = await transport.begin_transaction(role, token)
    await txn.send(output, b"too slow", partition=0)
    # The coordinator aborts the transaction after its timeout, with a bump.
    await eventually(lambda: transport.describe_epoch(role),
                     lambda status: status.token != token)

    async def send_and_commit() -> None:
        await txn.send(output, b"too late", partition=0)
        await txn.commit()

    with pytest.raises(FencedError):
        await send_and_commit()
    await txn.abort()  # a no-op now: nothing to abort
    with pytest.raises(FencedError):
        await transport.write_lease(role, token, 0, *lease_record(role, token))
    assert await committed_values(kafka_bootstrap, output) == []


async def test_a_cancelled_lease_write_does_not_wedge_the_producer(transport, role):
    token = await transport.acquire_epoch(role, LEASE)
    for yields in range(0, 40, 3):
        task = asyncio.ensure_future(
            transport.write_lease(role, token, 0, *lease_record(role, token)))
        await run_ready_callbacks(yields)  # cancel at a different await each round
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await transport.write_lease(role, token, 0, *lease_record(role, token))
    assert (await transport.describe_epoch(role)).token == token


async def test_release_closes_the_roles_producer(transport, role):
    token = await transport.acquire_epoch(role, LEASE)
    await transport.release(role, token)
    with pytest.raises(FencedError):
        await transport.write_lease(role, token, 0, *lease_record(role, token))


async def test_a_call_naming_an_old_token_is_fenced_and_leaves_the_newer_producer_alone(
    transport, role
):
    """A late call of this transport's previous tenure names its token; the
    re-acquired producer holds a newer one, so the call touches nothing."""
    old = await transport.acquire_epoch(role, LEASE)
    new = await transport.acquire_epoch(role, LEASE)
    with pytest.raises(FencedError):
        await transport.write_lease(role, old, 0, *lease_record(role, old))
    with pytest.raises(FencedError):
        await transport.begin_transaction(role, old)
    with pytest.raises(FencedError):
        await transport.release(role, old)
    assert (await transport.describe_epoch(role)).token == new
    offset = await transport.write_lease(role, new, 0, *lease_record(role, new, "newer"))
    read = await stable_read(transport, 0)
    assert [(r.offset, r.value) for r in read.records] == [
        (offset, lease_record(role, new, "newer")[1])]


# ------------------------------------------------------------------ check_topic


async def test_check_topic_accepts_a_compacted_topic_and_reports_the_abort_cleanup_interval(
    transport
):
    check = await transport.check_topic(PARTITIONS, LEASE)
    assert isinstance(check, TopicCheck)
    assert check.abort_cleanup_interval_ms > 0


async def test_check_topic_refuses_a_missing_topic(kafka_bootstrap):
    async with KafkaTransport(kafka_bootstrap, topic="kt-never-created") as transport:
        with pytest.raises(StateTopicError, match="does not exist") as refused:
            await transport.check_topic(PARTITIONS, LEASE)
    assert "cleanup.policy=compact" in str(refused.value)
    assert "--create" in str(refused.value)


async def test_check_topic_refuses_a_topic_that_is_not_compacted(kafka_bootstrap, new_topic):
    topic = await new_topic(compacted=False)
    async with KafkaTransport(kafka_bootstrap, topic=topic) as transport:
        with pytest.raises(StateTopicError, match=r"cleanup\.policy") as refused:
            await transport.check_topic(PARTITIONS, LEASE)
    assert "'compact'" in str(refused.value)


async def test_check_topic_refuses_a_wrong_partition_count(transport):
    with pytest.raises(StateTopicError, match=f"has {PARTITIONS} partitions") as refused:
        await transport.check_topic(PARTITIONS * 2, LEASE)
    assert f"partitions={PARTITIONS}" in str(refused.value)


async def test_check_topic_refuses_a_lease_over_the_transaction_max_timeout(transport):
    with pytest.raises(StateTopicError, match=r"transaction\.max\.timeout\.ms"):
        await transport.check_topic(PARTITIONS, 3600.0)


async def test_an_unreachable_bootstrap_is_a_clear_error_within_30_seconds():
    servers = f"127.0.0.1:{closed_port()}"
    started = time.monotonic()
    async with KafkaTransport(servers, operation_timeout=10) as transport:
        for call in (lambda: transport.describe_epoch("any.role"),
                     lambda: transport.acquire_epoch("any.role", LEASE),
                     lambda: transport.check_topic(PARTITIONS, LEASE)):
            with pytest.raises(KafkaUnavailableError, match=re.escape(servers)):
                await call()
    assert time.monotonic() - started < 30


# ------------------------------------------------------------------ lifecycle


async def test_closing_the_transport_stops_every_client_it_started(kafka_bootstrap,
                                                                    state_topic, role):
    before = asyncio.all_tasks()
    async with KafkaTransport(kafka_bootstrap, topic=state_topic) as transport:
        token = await transport.acquire_epoch(role, LEASE)
        await transport.check_topic(PARTITIONS, LEASE)
        await transport.append(0, *registration_record(role, "a"))
        await transport.write_lease(role, token, 0, *lease_record(role, token))
        await transport.read_partition(0)
        tail = await transport.tail(0, 0)
        await transport.describe_epoch(role)
    assert tail is not None
    left = [t for t in asyncio.all_tasks() - before if not t.done()]
    assert left == []


def test_connection_options_reach_every_client():
    security = {"security_protocol": "SASL_SSL", "ssl_context": object(),
                "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "u",
                "sasl_plain_password": "p", "client_id": "krabka"}
    options = ClientOptions("127.0.0.1:9", security)
    for kwargs in (options.producer(transactional_id="r"), options.consumer(),
                   options.admin(), options.client()):
        assert {k: kwargs[k] for k in security} == security


def test_options_the_protocol_fixes_are_refused():
    with pytest.raises(ValueError, match="isolation_level"):
        KafkaTransport("127.0.0.1:9", isolation_level="read_uncommitted")
    with pytest.raises(TypeError, match="no_such_option"):
        KafkaTransport("127.0.0.1:9", no_such_option=1)


# --------------------------------------------------------------- end to end


async def test_the_leadership_flow_runs_on_the_real_broker(kafka_bootstrap, transport, role,
                                                           new_topic):
    output = await new_topic(1, compacted=False)
    leadership = await acquire_leadership(
        transport, role, "a", partitions=PARTITIONS, lease_duration=3, renew_interval=1,
        challenge_stagger=0.5)
    assert (await describe_leadership(transport, role)).authoritative(leadership.token)
    async with leadership.transaction() as txn:
        await txn.send(output, b"guarded", partition=0)
    assert await committed_values(kafka_bootstrap, output) == [b"guarded"]
    await leadership.resign()
    assert not (await describe_leadership(transport, role)).authoritative(leadership.token)

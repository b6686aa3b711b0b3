"""KafkaTransport on a real broker: what only the Kafka adapter has.

The rules both transports follow are tests/kafka/test_transport_contract.py; here
are the adapter's own: fetch latency, one consumer for every tail, the
transaction protocol version, cancellation inside aiokafka, unreachable
clusters, closing, the aiokafka options, producers prepared ahead of a
challenge, and term mode's paths touching no transaction machinery. Every
test gets a fresh compacted state topic and terms topic with unique names.
Waits poll with a deadline; nothing sleeps a fixed time."""

from __future__ import annotations

import asyncio
import inspect
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiokafka.client
import aiokafka.errors
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.client import AIOKafkaClient
from aiokafka.conn import AIOKafkaConnection
from aiokafka.protocol.metadata import MetadataRequest

import krabka.kafka.transport as kafka_transport_module
from krabka import FencedError, acquire_leadership, describe_leadership
from krabka.format.partition import role_partition
from krabka.format.terms import (
    TERM_HEADER,
    Claim,
    Heartbeat,
    TermStamp,
    claim_key,
    encode_claim,
    encode_heartbeat,
    encode_term_header,
    encode_term_key,
    heartbeat_key,
)
from krabka.format.token import NO_EPOCH, FencingToken
from krabka.kafka import KafkaTransport, KafkaUnavailableError
from krabka.kafka.errors import KafkaTransportError, ProducerFatalError
from krabka.kafka.options import ClientOptions
from krabka.kafka.producer import direct_lease
from krabka.kafka.protocol.messages import TRANSACTIONAL_ID_NOT_FOUND
from krabka.transport import PartitionRead
from tests.support import polling
from tests.support.kafka_io import (
    committed_values,
    failing_fetches,
    read_committed,
    transactional_id_error,
)
from tests.support.lease_io import lease_record, registration_record, write_lease
from tests.support.loop import run_ready_callbacks
from tests.support.ports import free_port

pytestmark = pytest.mark.integration

PARTITIONS = 4
LEASE = 3.0
TXN_TIMEOUT = 2.0
DEADLINE = 30.0

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
async def terms_topic(new_topic: Callable[..., Awaitable[str]]) -> str:
    return await new_topic()


@pytest.fixture
async def transports(
    kafka_bootstrap: str, state_topic: str, terms_topic: str
) -> AsyncIterator[Callable[..., Awaitable[KafkaTransport]]]:
    """Open transports (processes) on the state and terms topics; all closed at the end."""
    opened: list[KafkaTransport] = []

    async def open_transport(**options: Any) -> KafkaTransport:
        transport = KafkaTransport(kafka_bootstrap, topic=state_topic, terms_topic=terms_topic,
                                   **options)
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


def count_coordinator_lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """From now on, the key of every FindCoordinator any aiokafka client sends."""
    lookups: list[str] = []
    lookup = AIOKafkaClient.coordinator_lookup

    async def counted_lookup(self: Any, kind: Any, key: str) -> Any:
        lookups.append(key)
        return await lookup(self, kind, key)

    monkeypatch.setattr(AIOKafkaClient, "coordinator_lookup", counted_lookup)
    return lookups


def count_bootstraps(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """From now on, every aiokafka client that bootstraps."""
    bootstraps: list[Any] = []
    bootstrap = AIOKafkaClient.bootstrap

    async def counted_bootstrap(self: Any) -> Any:
        bootstraps.append(self)
        return await bootstrap(self)

    monkeypatch.setattr(AIOKafkaClient, "bootstrap", counted_bootstrap)
    return bootstraps


def without_the_transports_metadata(transport: KafkaTransport,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on, `transport` cannot tell a new role producer where the cluster is."""
    async def unavailable(_topic: str) -> Any:
        raise KafkaUnavailableError("no metadata")

    monkeypatch.setattr(transport._coordinators, "topic_metadata", unavailable)


async def stable_read(transport: KafkaTransport, partition: int) -> PartitionRead:
    """A read once every commit marker is written (stable offset = high watermark)."""
    return await polling.eventually(lambda: transport.read_partition(partition),
                                    lambda read: read.last_stable_offset == read.high_watermark,
                                    DEADLINE)


# ----------------------------------------------------------------- StateReader


def consumers_started(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every aiokafka consumer the transports start from now on, in order."""
    started: list[Any] = []

    class CountingConsumer(AIOKafkaConsumer):  # type: ignore[misc]
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            started.append(self)

    monkeypatch.setattr(kafka_transport_module, "AIOKafkaConsumer", CountingConsumer)
    return started


async def test_tail_returns_a_newly_committed_record_within_a_fetch_round_trip(
    transport, role
):
    token = await transport.acquire_epoch(role, LEASE)
    start = await stable_read(transport, 2)
    tail = await transport.tail(2, start.last_stable_offset)
    try:
        waiting = asyncio.ensure_future(tail.next())
        offset = await write_lease(transport, role, token, 2, *lease_record(role, token))
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


async def test_tails_of_many_roles_share_one_consumer(transports, role, monkeypatch):
    started = consumers_started(monkeypatch)
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


async def test_reads_of_one_partition_from_different_offsets_share_one_fetch(
    transport, role, monkeypatch
):
    """The batched reader reads once, from the lowest offset asked, and gives
    each caller the records from its own offset on."""
    offsets = [await transport.append(0, *registration_record(role, m)) for m in "abcd"]
    await stable_read(transport, 0)
    reader = transport._reader
    started: list[dict[Any, int]] = []
    read_once = reader._read

    async def counted(starts: dict[Any, int]) -> dict[Any, PartitionRead]:
        started.append(dict(starts))
        return await read_once(starts)

    monkeypatch.setattr(reader, "_read", counted)
    reads = await asyncio.gather(*(transport.read_partition(0, start)
                                   for start in (offsets[3], offsets[1], offsets[2])))
    assert [[r.offset for r in read.records] for read in reads] == [
        offsets[3:], offsets[1:], offsets[2:]]
    assert [list(starts.values()) for starts in started] == [[offsets[1]]]


async def test_a_read_with_nothing_new_ends_with_the_fetch_that_shows_it(
    transport, role, monkeypatch
):
    """A standby that already folded what its tail delivered reads from the
    stable offset and finds nothing new, on every handover. aiokafka's getmany
    wakes only for records, so the read must end on the Fetch response that
    shows the end, not wait for records that are not coming."""
    await transport.append(0, *registration_record(role, "a"))
    end = (await stable_read(transport, 0)).last_stable_offset
    consumer = transport._reader._consumer
    drain = consumer.getmany

    async def wakes_only_for_records(*tps: Any, timeout_ms: int = 0) -> Any:
        if timeout_ms:
            await asyncio.Event().wait()  # no record is coming: this never returns
        return await drain(*tps, timeout_ms=0)

    monkeypatch.setattr(consumer, "getmany", wakes_only_for_records)
    read = await asyncio.wait_for(transport.read_partition(0, end), DEADLINE)
    assert (read.records, read.last_stable_offset) == ([], end)


async def test_the_transports_consumers_look_again_within_10_ms_when_a_pass_sent_no_fetch(
    transports, role, monkeypatch
):
    """aiokafka's fetch routine sleeps consumer_timeout_ms after a pass that sent
    no Fetch; one can find its node still in flight after a fetch finished, and
    then a standby's tail sat idle 200 ms before it saw the tombstone. A user's
    own setting is kept."""
    waits: list[int] = []

    class Recorded(AIOKafkaConsumer):  # type: ignore[misc]
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            waits.append(kwargs["consumer_timeout_ms"])

    monkeypatch.setattr(kafka_transport_module, "AIOKafkaConsumer", Recorded)
    default, own = await transports(), await transports(consumer_timeout_ms=50)
    for transport in (default, own):
        await transport.read_partition(0)
        tail = await transport.tail(1, 0)
        await tail.close()
    assert waits == [10, 10, 50, 50]


async def test_term_reads_and_tails_share_the_state_topics_consumers(
    transports, role, monkeypatch
):
    """One consumer reads both topics, one follows both: term mode adds no client."""
    started = consumers_started(monkeypatch)
    transport = await transports()
    term_offset = await transport.append_term(1, *claim(role, "a", 1))
    state_offset = await transport.append(1, *registration_record(role, "a"))
    assert [r.offset for r in (await transport.read_terms(1)).records] == [term_offset]
    assert [r.offset for r in (await transport.read_partition(1)).records] == [state_offset]
    tails = [await transport.tail_terms(1, 0), await transport.tail(1, 0)]
    try:
        for tail in tails:
            read = await asyncio.wait_for(tail.next(), DEADLINE)
            assert len(read.records) == 1
        assert len(started) == 2
    finally:
        for tail in tails:
            await tail.close()



async def test_a_tail_waits_out_a_transient_fetch_error_and_delivers_what_follows(
    transports, role, monkeypatch
):
    """A broker that goes away for a while fails a fetch: the hub fetches
    again from where it stood, and its tails miss nothing."""
    transport = await transports()
    first = await transport.append_term(1, *claim(role, "a", 1))
    tail = await transport.tail_terms(1, 0)
    try:
        read = await asyncio.wait_for(tail.next(), DEADLINE)
        assert [r.offset for r in read.records] == [first]
        raised = failing_fetches(
            transport, aiokafka.errors.KafkaConnectionError("the broker went away"),
            monkeypatch)

        async def fetched() -> list[BaseException]:
            return raised

        await polling.eventually(fetched, bool, within=DEADLINE)
        second = await transport.append_term(1, *claim(role, "b", 2))
        read = await asyncio.wait_for(tail.next(), DEADLINE)
        assert [r.offset for r in read.records] == [second]
    finally:
        await tail.close()


async def test_a_fetch_error_no_retry_outlasts_fails_each_tail_and_new_tails_read_on(
    transports, role, monkeypatch
):
    transport = await transports()
    tail = await transport.tail_terms(1, 0)
    refused = aiokafka.errors.TopicAuthorizationFailedError()
    try:
        failing_fetches(transport, refused, monkeypatch)
        with pytest.raises(KafkaTransportError) as failed:
            await asyncio.wait_for(tail.next(), DEADLINE)
        assert failed.value.__cause__ is refused
    finally:
        await tail.close()
    again = await transport.tail_terms(1, 0)
    try:
        claimed = await transport.append_term(1, *claim(role, "a", 1))
        read = await asyncio.wait_for(again.next(), DEADLINE)
        while claimed not in [r.offset for r in read.records]:
            read = await asyncio.wait_for(again.next(), DEADLINE)
    finally:
        await again.close()


# ------------------------------------------------------------------- term mode


def claim(role: str, member: str, term: int) -> tuple[bytes, bytes]:
    return (encode_term_key(claim_key(role, member, term)),
            encode_claim(Claim(member, term, time.time_ns() // 1_000_000)))


async def test_term_mode_never_creates_a_transactional_producer_nor_a_roles_transactional_id(
    kafka_bootstrap, transports, role, new_topic, monkeypatch
):
    """Every term-mode path, and the registrations, through one plain idempotent
    producer; afterwards DescribeTransactions for the role's transactional id
    answers TRANSACTIONAL_ID_NOT_FOUND: no InitProducerId ever named it."""
    producers: list[dict[str, Any]] = []

    class RecordingProducer(AIOKafkaProducer):  # type: ignore[misc]
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            producers.append(kwargs)

    monkeypatch.setattr(kafka_transport_module, "AIOKafkaProducer", RecordingProducer)
    output = await new_topic(2, compacted=False)
    transport = await transports()
    partition = role_partition(role, PARTITIONS)
    await transport.check_topic(PARTITIONS, None)
    await transport.check_terms_topic(PARTITIONS)
    await transport.append(partition, *registration_record(role, "a"))
    tail = await transport.tail_terms(partition, 0)
    try:
        claimed = await transport.append_term(partition, *claim(role, "a", 1))
        assert [r.offset for r in (await transport.read_terms(partition)).records] == [claimed]
        await asyncio.wait_for(tail.next(), DEADLINE)
        await transport.append_term(partition, encode_term_key(heartbeat_key(role)),
                                    encode_heartbeat(Heartbeat("a", 1, 0)))
    finally:
        await tail.close()
    stamp = [(TERM_HEADER, encode_term_header(TermStamp(role, 1)))]
    for p in range(await transport.output_partitions(output)):
        await transport.write_output(output, p, b"k", b"v", stamp)

    assert len(producers) == 1
    assert producers[0].get("transactional_id") is None
    assert producers[0]["enable_idempotence"] is True
    assert await transactional_id_error(kafka_bootstrap, role) == TRANSACTIONAL_ID_NOT_FOUND


# --------------------------------------------------------------- LeaseWriter


async def test_200_renewals_keep_the_token_on_a_transaction_version_2_cluster(
    transport, role
):
    features = await transport.api_versions()
    assert features.finalized_level("transaction.version") >= 2
    token = await transport.acquire_epoch(role, LEASE)
    for _ in range(200):
        await write_lease(transport, role, token, 0, *lease_record(role, token))
    status = await transport.describe_epoch(role)
    assert status.token == token
    assert status.state in ("CompleteCommit", "PrepareCommit")


async def test_a_cancelled_lease_write_does_not_wedge_the_producer(transport, role):
    token = await transport.acquire_epoch(role, LEASE)
    for yields in range(0, 40, 3):
        task = asyncio.ensure_future(
            write_lease(transport, role, token, 0, *lease_record(role, token)))
        await run_ready_callbacks(yields)  # cancel at a different await each round
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await write_lease(transport, role, token, 0, *lease_record(role, token))
    assert (await transport.describe_epoch(role)).token == token


# ------------------------------------------------ lease writes in requests of our own


def requests_of(transport: KafkaTransport, role: str,
                fail: Callable[[Any, int], BaseException | None] | None = None
                ) -> list[tuple[str, int]]:
    """From now on, every request the role's producer sends, as (kind, API key):
    kind "direct" for `krabka.kafka.producer.direct_lease`'s, "aiokafka" for the
    producer's own. `fail(request, n)` may return an error to raise instead of
    the n-th (from 1) direct request of that API key; the real request is sent
    first when the error is a lost answer (``KafkaConnectionError``)."""
    client = transport._producers[role].producer.client
    send = client.send
    sent: list[tuple[str, int]] = []

    async def recorded(node_id: Any, request: Any, **kwargs: Any) -> Any:
        direct = isinstance(request, direct_lease.DirectRequest)
        sent.append(("direct" if direct else "aiokafka", request.API_KEY if not direct
                     else request.api_key))
        error = fail(request, sum(1 for kind, key in sent if kind == "direct"
                                  and key == request.api_key)) if direct and fail else None
        if error is None:
            return await send(node_id, request, **kwargs)
        if isinstance(error, aiokafka.errors.KafkaConnectionError):
            await send(node_id, request, **kwargs)
        raise error

    client.send = recorded
    return sent


ADD, PRODUCE, END = 24, 0, 26


def asked(sent: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """`sent` without the AddPartitionsToTxn asked again at once (the
    coordinator answers CONCURRENT_TRANSACTIONS while the previous
    transaction's markers are written)."""
    return [request for i, request in enumerate(sent)
            if not (request[1] == ADD and i and sent[i - 1] == request)]


async def acquire_and_renew_once(transport: KafkaTransport, role: str) -> FencingToken:
    """A role's token, after one renewal: its producer knows the topic's leaders."""
    token = await transport.acquire_epoch(role, LEASE)
    await write_lease(transport, role, token, 1, *lease_record(role, token))
    return token


async def test_a_renewal_goes_out_as_three_requests_of_our_own_and_commits(
    transport, role, kafka_bootstrap, state_topic
):
    token = await acquire_and_renew_once(transport, role)
    sent = requests_of(transport, role)
    key, value = lease_record(role, token)
    offsets = [await write_lease(transport, role, token, 0, key, value) for _ in range(3)]
    assert asked(sent) == [("direct", ADD), ("direct", PRODUCE), ("direct", END)] * 3
    committed = await read_committed(kafka_bootstrap, state_topic)
    assert [(r.offset, r.value) for r in committed][-3:] == [(o, value) for o in offsets]
    assert (await transport.describe_epoch(role)).token == token


async def test_a_produce_whose_answer_was_lost_is_sent_again_and_written_once(
    transport, role, kafka_bootstrap, state_topic
):
    token = await acquire_and_renew_once(transport, role)
    lost = aiokafka.errors.KafkaConnectionError("the answer was lost")
    sent = requests_of(transport, role, lambda request, n: lost
                       if request.api_key == PRODUCE and n == 1 else None)
    key, value = lease_record(role, token)
    offset = await write_lease(transport, role, token, 0, key, value)
    assert asked(sent) == [("direct", ADD), ("direct", PRODUCE), ("direct", PRODUCE),
                           ("direct", END)]
    committed = await read_committed(kafka_bootstrap, state_topic)
    assert [(r.offset, r.value) for r in committed] == [(offset, value)]
    await write_lease(transport, role, token, 0, key, value)  # the sequence is in step


async def test_a_produce_refused_for_good_gives_its_sequence_number_back(
    transport, role, kafka_bootstrap, state_topic
):
    token = await acquire_and_renew_once(transport, role)
    key, value = lease_record(role, token)
    too_large = b"x" * (2 << 20)  # past the broker's message.max.bytes
    with pytest.raises(KafkaTransportError, match="MessageSizeTooLarge"):
        await write_lease(transport, role, token, 0, key, too_large)
    offset = await write_lease(transport, role, token, 0, key, value)
    committed = await read_committed(kafka_bootstrap, state_topic)
    assert [(r.offset, r.value) for r in committed] == [(offset, value)]


async def test_a_lease_write_the_coordinator_did_not_take_goes_through_the_producer(
    transport, role, kafka_bootstrap, state_topic
):
    token = await acquire_and_renew_once(transport, role)
    sent = requests_of(transport, role, lambda request, n: aiokafka.errors.NodeNotReadyError()
                       if request.api_key == ADD else None)
    key, value = lease_record(role, token)
    offset = await write_lease(transport, role, token, 0, key, value)
    assert sent[0] == ("direct", ADD)
    assert ("aiokafka", ADD) in sent
    assert ("aiokafka", PRODUCE) in sent
    assert ("aiokafka", END) in sent
    committed = await read_committed(kafka_bootstrap, state_topic)
    assert [(r.offset, r.value) for r in committed] == [(offset, value)]


async def test_a_commit_without_an_answer_is_completed_by_the_producer(
    transport, role, kafka_bootstrap, state_topic
):
    token = await acquire_and_renew_once(transport, role)
    lost = aiokafka.errors.KafkaConnectionError("the answer was lost")
    sent = requests_of(transport, role, lambda request, n: lost
                       if request.api_key == END else None)
    key, value = lease_record(role, token)
    offset = await write_lease(transport, role, token, 0, key, value)
    assert asked(sent)[:3] == [("direct", ADD), ("direct", PRODUCE), ("direct", END)]
    assert ("aiokafka", END) in asked(sent)[3:]
    committed = await read_committed(kafka_bootstrap, state_topic)
    assert [(r.offset, r.value) for r in committed] == [(offset, value)]
    await write_lease(transport, role, token, 0, key, value)


async def test_a_lease_write_in_flight_when_its_producer_is_released_is_a_fence_not_a_cancel(
    transport, role
):
    token = await acquire_and_renew_once(transport, role)
    client = transport._producers[role].producer.client
    send = client.send
    produce_reached = asyncio.Event()

    async def stalled(node_id: Any, request: Any, **kwargs: Any) -> Any:
        if getattr(request, "api_key", None) == PRODUCE:
            produce_reached.set()
            await asyncio.Event().wait()  # an answer that never comes
        return await send(node_id, request, **kwargs)

    client.send = stalled
    write = asyncio.ensure_future(
        write_lease(transport, role, token, 0, *lease_record(role, token)))
    await asyncio.wait_for(produce_reached.wait(), DEADLINE)
    await transport.release(role, token)
    with pytest.raises(FencedError, match="released"):
        await asyncio.wait_for(write, DEADLINE)


async def test_a_lease_write_unanswered_for_the_transaction_timeout_closes_its_producer(
    transport, role
):
    token = await acquire_and_renew_once(transport, role)
    client = transport._producers[role].producer.client
    send = client.send

    async def unanswered(node_id: Any, request: Any, **kwargs: Any) -> Any:
        if getattr(request, "api_key", None) == PRODUCE:
            await asyncio.Event().wait()
        return await send(node_id, request, **kwargs)

    client.send = unanswered
    started = time.monotonic()
    with pytest.raises(KafkaUnavailableError, match="did not complete within the transaction"):
        await write_lease(transport, role, token, 0, *lease_record(role, token))
    assert time.monotonic() - started < DEADLINE
    with pytest.raises(ProducerFatalError, match="closed"):
        await write_lease(transport, role, token, 0, *lease_record(role, token))


async def test_a_guarded_write_after_a_direct_lease_write_joins_its_transaction(
    transport, role, kafka_bootstrap, state_topic
):
    token = await acquire_and_renew_once(transport, role)
    key, value = lease_record(role, token)
    txn = await transport.begin_transaction(role, token)
    offset = await txn.write_lease(0, key, value)
    await txn.send(state_topic, b"output", key=b"out", partition=0)
    await txn.commit()
    committed = await read_committed(kafka_bootstrap, state_topic)
    assert [(r.offset, r.value) for r in committed] == [(offset, value), (offset + 1, b"output")]
    txn = await transport.begin_transaction(role, token)
    await txn.write_lease(0, key, value)
    await txn.abort()
    assert len(await read_committed(kafka_bootstrap, state_topic)) == 2
    await write_lease(transport, role, token, 0, key, value)
    assert len(await read_committed(kafka_bootstrap, state_topic)) == 3


# ------------------------------------------------------------------ reachability


async def test_an_unreachable_bootstrap_is_a_clear_error_within_30_seconds():
    servers = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    async with KafkaTransport(servers, operation_timeout=10) as transport:
        for call in (lambda: transport.describe_epoch("any.role"),
                     lambda: transport.acquire_epoch("any.role", LEASE),
                     lambda: transport.check_topic(PARTITIONS, LEASE),
                     lambda: transport.check_terms_topic(PARTITIONS),
                     lambda: transport.output_partitions("any-topic")):
            with pytest.raises(KafkaUnavailableError, match=re.escape(servers)):
                await call()
    assert time.monotonic() - started < 30


# ------------------------------------------------------------------ lifecycle


async def test_closing_the_transport_stops_every_client_it_started(
    kafka_bootstrap, state_topic, terms_topic, role, new_topic
):
    output = await new_topic(2, compacted=False)
    before = asyncio.all_tasks()
    async with KafkaTransport(kafka_bootstrap, topic=state_topic,
                              terms_topic=terms_topic) as transport:
        token = await transport.acquire_epoch(role, LEASE)
        await transport.check_topic(PARTITIONS, LEASE)
        await transport.check_terms_topic(PARTITIONS)
        await transport.append(0, *registration_record(role, "a"))
        await transport.append_term(0, *claim(role, "a", 1))
        await transport.write_output(output, 1, b"k", b"v", [])
        await write_lease(transport, role, token, 0, *lease_record(role, token))
        await transport.read_partition(0)
        await transport.read_terms(0)
        tails = [await transport.tail(0, 0), await transport.tail_terms(0, 0)]
        await transport.describe_epoch(role)
    assert len(tails) == 2
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


# ------------------------------------------------------- the authority check


async def test_an_authority_check_creates_no_task_and_finds_the_coordinator_once(
        transport, role, monkeypatch):
    await describe_leadership(transport, role)  # the first call finds the coordinator
    lookups = count_coordinator_lookups(monkeypatch)
    loop = asyncio.get_running_loop()
    created: list[str] = []
    default_factory = loop.get_task_factory()

    def counting(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        created.append(getattr(coro, "__qualname__", repr(coro)))
        return asyncio.Task(coro, loop=loop, **kwargs)

    assert default_factory is None  # so the plain Task is what the loop makes
    loop.set_task_factory(counting)
    try:
        for _ in range(20):
            assert (await describe_leadership(transport, role)).token == NO_EPOCH
    finally:
        loop.set_task_factory(default_factory)
    assert created == []
    assert lookups == []


async def test_a_started_transport_checks_authority_without_waiting_on_the_start_lock(
        transport, role):
    await describe_leadership(transport, role)
    # A first call that is still starting the client holds this lock.
    async with transport._coordinators._start_lock:
        status = await asyncio.wait_for(describe_leadership(transport, role), DEADLINE)
    assert status.role == role


# ------------------------------------------- producers prepared ahead of a challenge


async def prepared_and_ready(transport: KafkaTransport, role: str) -> Any:
    """The producer `prepare_epoch` connected for `role`, once its preparation ended well."""
    async def probe() -> Any:
        return transport._prepared._by_role.get(role)

    held = await polling.eventually(probe, lambda h: h is not None and h.task.done(), DEADLINE)
    assert held.task.exception() is None
    return held.producer


async def closed(producer: Any) -> bool:
    return bool(producer._closed)


async def takes_over_with(standby: KafkaTransport, prepared: Any, role: str,
                          holder: KafkaTransport | None = None,
                          token: FencingToken | None = None) -> FencingToken:
    """`standby` acquires `role` with its `prepared` producer: `holder`'s `token`
    is fenced, and the new token writes and is the role's."""
    minted = await standby.acquire_epoch(role, LEASE)
    assert standby._producers[role].producer is prepared
    if holder is not None and token is not None:
        with pytest.raises(FencedError):
            await write_lease(holder, role, token, 0, *lease_record(role, token))
    await write_lease(standby, role, minted, 0, *lease_record(role, minted))
    assert (await standby.describe_epoch(role)).token == minted
    return minted


async def test_a_prepared_producer_mints_nothing_and_the_holder_goes_on_writing(
        transports, role):
    holder, standby = await transports(), await transports()
    token = await holder.acquire_epoch(role, LEASE)
    await standby.prepare_epoch(role, LEASE, 0)
    await prepared_and_ready(standby, role)
    assert (await standby.describe_epoch(role)).token == token
    await write_lease(holder, role, token, 0, *lease_record(role, token))
    assert (await holder.describe_epoch(role)).token == token


async def test_acquiring_after_a_preparation_only_starts_the_prepared_producer(
        transports, role, monkeypatch):
    holder, standby = await transports(), await transports()
    token = await holder.acquire_epoch(role, LEASE)
    await standby.prepare_epoch(role, LEASE, 0)
    prepared = await prepared_and_ready(standby, role)

    async def located() -> bool:
        return role in standby._coordinators._nodes

    await polling.eventually(located, bool, DEADLINE)  # the raw client's own lookup
    assert prepared.client.cluster.partitions_for_topic(standby.topic)  # no metadata to wait for
    bootstraps = count_bootstraps(monkeypatch)
    lookups = count_coordinator_lookups(monkeypatch)
    minted = await takes_over_with(standby, prepared, role)
    assert (bootstraps, lookups) == ([], [])
    assert minted.producer_id == token.producer_id
    assert minted.producer_epoch > token.producer_epoch
    with pytest.raises(FencedError):
        await write_lease(holder, role, token, 0, *lease_record(role, token))


async def test_a_prepared_producer_starts_from_the_transports_metadata_and_opens_one_connection(
        transports, role, monkeypatch):
    """No bootstrap connection, Metadata or FindCoordinator of its own: the
    transport's client answers for it, once for many roles."""
    holder, standby = await transports(), await transports()
    token = await holder.acquire_epoch(role, LEASE)
    bootstraps = count_bootstraps(monkeypatch)
    await standby.prepare_epoch(role, LEASE, 0)
    prepared = await prepared_and_ready(standby, role)
    assert prepared.client not in bootstraps
    assert len(prepared.client._conns) == 1
    lookups = count_coordinator_lookups(monkeypatch)
    other = f"{role}-other"
    await standby.prepare_epoch(other, LEASE, 0)
    second = await prepared_and_ready(standby, other)
    assert second.client not in bootstraps
    assert lookups == [other]  # the transport's client, for the resignation too
    await takes_over_with(standby, prepared, role, holder, token)


async def test_without_the_transports_metadata_a_prepared_producer_bootstraps_itself(
        transports, role, monkeypatch):
    standby = await transports()
    without_the_transports_metadata(standby, monkeypatch)
    bootstraps = count_bootstraps(monkeypatch)
    await standby.prepare_epoch(role, LEASE, 0)
    prepared = await prepared_and_ready(standby, role)
    assert prepared.client in bootstraps
    await takes_over_with(standby, prepared, role)


async def test_a_preparation_reads_the_declared_outputs_metadata_and_never_asks_for_a_missing_one(
        transports, role, new_topic, monkeypatch):
    """aiokafka's Metadata requests would create a missing topic on a cluster
    that auto-creates topics: a standby must not create an output it may never write."""
    asked: list[str] = []
    send = AIOKafkaConnection.send

    def recording(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        # The topic checks ask without creating; aiokafka's clients ask creating.
        if isinstance(request, MetadataRequest) and request._allow_auto_topic_creation is not False:
            asked.extend(request._topics or ())
        return send(self, request, *args, **kwargs)

    monkeypatch.setattr(AIOKafkaConnection, "send", recording)
    holder, standby = await transports(), await transports()
    await holder.acquire_epoch(role, LEASE)
    output, missing = await new_topic(2, compacted=False), f"kt-missing-{uuid.uuid4().hex[:8]}"
    await standby.prepare_epoch(role, LEASE, 0, (output, missing))
    prepared = await prepared_and_ready(standby, role)
    # The first guarded write to the output after the takeover asks for no metadata.
    assert prepared.client.cluster.partitions_for_topic(output) == {0, 1}
    assert prepared.client.cluster.partitions_for_topic(standby.topic)
    assert output in asked
    assert missing not in asked


async def test_a_preparation_for_another_transaction_timeout_is_closed_not_used(
        transports, role):
    standby = await transports()
    await standby.prepare_epoch(role, LEASE, 0)
    prepared = await prepared_and_ready(standby, role)
    await standby.acquire_epoch(role, LEASE * 2)
    assert standby._producers[role].producer is not prepared
    await polling.eventually(lambda: closed(prepared), bool, DEADLINE)


async def test_a_transport_keeps_at_most_its_number_of_prepared_producers(transports):
    standby = await transports(prepared_producers=2)
    roles = [f"test.kt-{uuid.uuid4().hex[:8]}" for _ in range(3)]
    await standby.prepare_epoch(roles[0], LEASE, 0)
    oldest = standby._prepared._by_role[roles[0]].producer
    for role in roles[1:]:
        await standby.prepare_epoch(role, LEASE, 0)
    assert [role in standby._prepared for role in roles] == [False, True, True]
    await polling.eventually(lambda: closed(oldest), bool, DEADLINE)
    off = await transports(prepared_producers=0)
    await off.prepare_epoch(roles[0], LEASE, 0)
    assert len(off._prepared) == 0
    with pytest.raises(ValueError, match="prepared producers"):
        KafkaTransport("127.0.0.1:1", prepared_producers=-1)


async def test_a_waited_preparation_has_ended_when_it_returns_and_stays_outside_the_limit(
        transports):
    """A challenger waits for its producer before its last read; that producer
    is the one its challenge opens anyway, so no limit applies to it."""
    standby = await transports(prepared_producers=1)
    roles = [f"test.kt-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    await standby.prepare_epoch(roles[0], LEASE, 0)
    await standby.prepare_epoch(roles[1], LEASE, 0, wait=True)
    waited = standby._prepared._by_role[roles[1]].task
    assert waited.done()
    assert waited.exception() is None
    assert [role in standby._prepared for role in roles] == [True, True]
    await standby.prepare_epoch(roles[1], LEASE, 0)  # no longer waited for: the limit holds
    assert [role in standby._prepared for role in roles] == [False, True]
    off = await transports(prepared_producers=0)
    await off.prepare_epoch(roles[0], LEASE, 0, wait=True)
    assert roles[0] in off._prepared
    await off.discard_prepared(roles[0])
    assert len(off._prepared) == 0


async def test_discarding_and_closing_close_every_prepared_producer(
        kafka_bootstrap, state_topic, terms_topic, role):
    before = asyncio.all_tasks()
    async with KafkaTransport(kafka_bootstrap, topic=state_topic,
                              terms_topic=terms_topic) as transport:
        await transport.prepare_epoch(role, LEASE, 0)
        discarded = await prepared_and_ready(transport, role)
        await transport.discard_prepared(role)
        await polling.eventually(lambda: closed(discarded), bool, DEADLINE)
        await transport.prepare_epoch(f"{role}.2", LEASE, 1)
        still_preparing = transport._prepared._by_role[f"{role}.2"].producer
    assert await closed(still_preparing)
    left = [t for t in asyncio.all_tasks() - before if not t.done()]
    assert left == []


class BootstrapConnections:
    """The connections aiokafka's ``bootstrap()`` opens from now on.

    ``bootstrap()`` holds its first connection in a local variable while it
    asks for the cluster's metadata: recorded here, only a close disconnects
    it. Its Metadata request waits until `answer` is called, so a test can
    cancel the bootstrap at that point whatever the broker's speed.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.conns: list[AIOKafkaConnection] = []
        self._clients: list[AIOKafkaClient] = []
        self._answered = asyncio.Event()
        create_conn = aiokafka.client.create_conn

        async def recorded(*args: Any, **kwargs: Any) -> AIOKafkaConnection:
            caller = inspect.currentframe().f_back  # type: ignore[union-attr]
            conn = await create_conn(*args, **kwargs)
            if caller.f_code.co_name == "bootstrap":
                self.conns.append(conn)
                self._clients.append(caller.f_locals["self"])
                send = conn.send

                async def held(request: Any, *more: Any, **options: Any) -> Any:
                    await self._answered.wait()
                    return await send(request, *more, **options)

                conn.send = held  # type: ignore[method-assign]
            return conn

        monkeypatch.setattr(aiokafka.client, "create_conn", recorded)

    async def opened(self, client: AIOKafkaClient | None = None) -> None:
        """Wait until a bootstrap (`client`'s, if given) waits for its metadata."""
        async def waiting() -> bool:
            return any(client is None or held is client for held in self._clients)

        await polling.eventually(waiting, bool, DEADLINE)

    async def answer(self) -> None:
        """Let the held Metadata requests go once the cancellation has spread."""
        await run_ready_callbacks()
        self._answered.set()

    async def cancelled_while_waiting(self, work: Awaitable[Any]) -> None:
        """Run `work`, cancel it once a bootstrap waits, and see it raise the cancellation."""
        task = asyncio.ensure_future(work)
        await self.opened()
        task.cancel()
        await self.answer()
        with pytest.raises(asyncio.CancelledError):
            await task

    async def all_closed(self) -> bool:
        async def still_open() -> list[AIOKafkaConnection]:
            return [conn for conn in self.conns if conn.connected()]

        return await polling.eventually(still_open, lambda conns: not conns, DEADLINE) == []


async def test_a_preparation_discarded_while_it_bootstraps_leaves_no_connection_open(
        transports, role, monkeypatch):
    standby = await transports()
    await standby._exists(standby.topic)  # the admin client is up: only the preparation's waits
    without_the_transports_metadata(standby, monkeypatch)  # so the preparation bootstraps
    bootstraps = BootstrapConnections(monkeypatch)
    await standby.prepare_epoch(role, LEASE, 0)  # the preparation starts at the next await
    await bootstraps.opened(standby._prepared._by_role[role].producer.client)
    await standby.discard_prepared(role)
    await bootstraps.answer()
    assert await bootstraps.all_closed()


async def test_an_acquisition_cancelled_while_its_producer_bootstraps_leaves_no_connection_open(
        transport, role, monkeypatch):
    bootstraps = BootstrapConnections(monkeypatch)
    await bootstraps.cancelled_while_waiting(transport.acquire_epoch(role, LEASE))
    assert await bootstraps.all_closed()


async def test_a_consumer_start_cancelled_while_it_bootstraps_leaves_no_connection_open(
        transport, monkeypatch):
    bootstraps = BootstrapConnections(monkeypatch)
    await bootstraps.cancelled_while_waiting(transport._new_consumer(fetch_max_wait_ms=100))
    assert await bootstraps.all_closed()


async def test_a_transport_closed_while_it_finds_a_coordinator_ahead_leaves_no_connection_open(
        transports, role, monkeypatch):
    standby = await transports()
    bootstraps = BootstrapConnections(monkeypatch)
    standby._coordinators.warm(role)
    await bootstraps.opened()
    closing = asyncio.ensure_future(standby.close())
    await bootstraps.answer()
    await closing
    assert await bootstraps.all_closed()


async def test_the_standby_first_in_line_takes_over_with_the_producer_it_prepared(
        transports, role):
    options = dict(partitions=PARTITIONS, lease_duration=3, renew_interval=1,
                   challenge_stagger=0.5)
    holder, standby = await transports(), await transports()
    leader = await acquire_leadership(holder, role, "a", **options)
    waiting = asyncio.ensure_future(acquire_leadership(standby, role, "b", **options))
    prepared = await prepared_and_ready(standby, role)
    await leader.resign()
    successor = await asyncio.wait_for(waiting, DEADLINE)
    assert standby._producers[role].producer is prepared
    assert (await describe_leadership(standby, role)).authoritative(successor.token)
    await successor.resign()


async def test_a_new_holder_finds_its_coordinator_ahead_of_its_resignation(
        transport, role, monkeypatch):
    await transport.acquire_epoch(role, LEASE)

    async def located() -> bool:
        return role in transport._coordinators._nodes

    await polling.eventually(located, bool, DEADLINE)
    lookups = count_coordinator_lookups(monkeypatch)
    await transport.describe_epoch(role)
    assert lookups == []


async def test_a_role_producer_talks_to_its_broker_over_one_connection(transport, role):
    # The test broker is the partition's leader and the role's transaction
    # coordinator at once: aiokafka alone would open a second connection to it
    # for the coordinator's requests.
    token = await transport.acquire_epoch(role, LEASE)
    await write_lease(transport, role, token, 0, *lease_record(role, token))
    await write_lease(transport, role, token, 0, *lease_record(role, token))
    client = transport._producers[role].producer.client
    assert len(client.cluster.brokers()) == 1
    assert len([conn for conn in client._conns.values() if conn.connected()]) == 1

"""The transport contract: what the protocol relies on of Kafka, for both transports.

Every test runs against `MemoryTransport` (``[memory]``) and against
`KafkaTransport` on the real broker (``[kafka]``, marked `integration`), so
the in-memory model the deterministic simulation runs on is held to what
Kafka does. Each test gets a fresh cluster view: a new state topic, and
`cluster.process()` opens another client process on it. Waits poll with a
deadline; in memory, time passes by moving the cluster's clock.

Term mode's two protocols (`TermLog` on the terms topic, `OutputWriter` on a
leader's outputs) are held to the same rules, without transactions.

Run against a broken in-memory broker (``TRANSPORT_CONTRACT_BROKER``, see
tests/faults/broken_brokers.py) the suite must fail; tests/kafka/test_contract_can_fail.py
checks that it does.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import pytest

from krabka import FencedError, FencingToken, StateTopicError, TransportError
from krabka.format.partition import murmur2, to_positive
from krabka.format.terms import (
    TERM_HEADER,
    Barrier,
    Claim,
    Heartbeat,
    TermStamp,
    barrier_key,
    claim_key,
    encode_barrier,
    encode_claim,
    encode_heartbeat,
    encode_term_header,
    encode_term_key,
    heartbeat_key,
)
from krabka.format.token import NO_EPOCH
from krabka.transport import PartitionRead, TopicCheck
from tests.support import polling
from tests.support.lease_io import lease_record, registration_record, write_lease
from tests.support.transport_backends import KafkaBackend, MemoryBackend

LEASE = 3.0
TXN_TIMEOUT = 2.0

Cluster = MemoryBackend | KafkaBackend


@pytest.fixture(params=[
    pytest.param("memory", id="memory"),
    pytest.param("kafka", id="kafka", marks=pytest.mark.integration),
])
def backend(request: pytest.FixtureRequest) -> Cluster:
    if request.param == "kafka":
        return KafkaBackend(request.getfixturevalue("kafka_bootstrap"))
    return MemoryBackend()


@pytest.fixture
async def cluster(backend: Cluster) -> AsyncIterator[Cluster]:
    await backend.start()
    try:
        yield backend
    finally:
        await backend.close()


@pytest.fixture
def role() -> str:
    return f"test.contract-{uuid.uuid4().hex[:8]}"


# -------------------------------------------------------------------- helpers


async def stable_read(cluster: Cluster, transport, partition: int) -> PartitionRead:
    """A read once every commit marker is written (stable offset = high watermark)."""
    return await cluster.eventually(lambda: transport.read_partition(partition),
                                    lambda read: read.last_stable_offset == read.high_watermark)


async def committed_values(cluster: Cluster, topic: str) -> list[bytes | None]:
    """What a read_committed reader of partition 0 of `topic` sees once it is stable."""
    reader = await cluster.process(topic)
    return [record.value for record in (await stable_read(cluster, reader, 0)).records]


# ---------------------------------------------------------------- Coordinator


async def test_the_first_acquire_mints_epoch_0_and_each_next_one_bumps_it(cluster, role):
    transport = await cluster.process()
    tokens = [await transport.acquire_epoch(role, LEASE) for _ in range(8)]
    first = tokens[0]
    assert first.producer_epoch == 0
    assert tokens == [FencingToken(first.producer_id, epoch) for epoch in range(8)]


async def test_roles_get_distinct_producer_ids(cluster, role):
    transport = await cluster.process()
    a = await transport.acquire_epoch(f"{role}-a", LEASE)
    b = await transport.acquire_epoch(f"{role}-b", LEASE)
    assert a.producer_id != b.producer_id


async def test_describe_epoch_reports_the_producers_token(cluster, role):
    transport = await cluster.process()
    token = await transport.acquire_epoch(role, LEASE)
    status = await transport.describe_epoch(role)
    assert (status.token, status.state) == (token, "Empty")
    assert status.authoritative(token)


async def test_a_role_never_taken_describes_as_no_epoch(cluster, role):
    status = await (await cluster.process()).describe_epoch(role)
    assert (status.token, status.state) == (NO_EPOCH, "Unknown")
    assert not status.authoritative(NO_EPOCH)


async def test_a_lease_write_of_a_superseded_producer_is_fenced(cluster, role):
    old, new = await cluster.process(), await cluster.process()
    token = await old.acquire_epoch(role, LEASE)
    successor = await new.acquire_epoch(role, LEASE)
    assert successor == FencingToken(token.producer_id, token.producer_epoch + 1)
    with pytest.raises(FencedError):
        await write_lease(old, role, token, 0, *lease_record(role, token))
    with pytest.raises(FencedError):  # the fenced producer is gone for good
        await write_lease(old, role, token, 0, *lease_record(role, token))
    assert (await stable_read(cluster, new, 0)).records == []


async def test_a_challenge_during_an_open_transaction_aborts_it_with_an_extra_bump(
    cluster, role
):
    output = await cluster.new_topic(1, compacted=False)
    old, new = await cluster.process(), await cluster.process()
    first = await old.acquire_epoch(role, LEASE)
    txn = await old.begin_transaction(role, first)
    await txn.send(output, b"zombie", partition=0)
    token = await new.acquire_epoch(role, LEASE)
    assert token == FencingToken(first.producer_id, first.producer_epoch + 2)
    with pytest.raises(FencedError):
        await txn.commit()
    assert await committed_values(cluster, output) == []


async def test_a_conditional_bump_with_the_current_token_bumps(cluster, role):
    transport = await cluster.process()
    token = await transport.acquire_epoch(role, LEASE)
    bumped = await transport.acquire_epoch(role, LEASE, current=token)
    assert bumped == FencingToken(token.producer_id, token.producer_epoch + 1)
    assert (await transport.describe_epoch(role)).token == bumped
    with pytest.raises(FencedError):  # the resigned token cannot write any more
        await write_lease(transport, role, token, 0, *lease_record(role, token))


async def test_a_conditional_bump_moves_the_producer_to_the_new_epoch(cluster, role):
    """The producer that held the bumped token writes on under the new one:
    several transactions, so the idempotent sequence numbers restart too."""
    transport = await cluster.process()
    token = await transport.acquire_epoch(role, LEASE)
    await write_lease(transport, role, token, 0, *lease_record(role, token))
    bumped = await transport.acquire_epoch(role, LEASE, current=token)
    offsets = [await write_lease(transport, role, bumped, 0, *lease_record(role, bumped))
               for _ in range(3)]
    assert offsets == sorted(offsets)
    read = await stable_read(cluster, transport, 0)
    assert read.records[-1].offset == offsets[-1]
    assert (await transport.describe_epoch(role)).token == bumped
    await transport.release(role, bumped)


async def test_a_conditional_bump_with_a_stale_token_is_fenced_and_bumps_nothing(
    cluster, role
):
    old, new = await cluster.process(), await cluster.process()
    stale = await old.acquire_epoch(role, LEASE)
    successor = await new.acquire_epoch(role, LEASE)
    with pytest.raises(FencedError):
        await old.acquire_epoch(role, LEASE, current=stale)
    assert (await new.describe_epoch(role)).token == successor
    # the successor still writes
    await write_lease(new, role, successor, 0, *lease_record(role, successor))


async def test_a_conditional_bump_with_a_stale_epoch_aborts_the_current_epochs_open_transaction(
    cluster, role
):
    """Kafka checks only the producer id of a conditional InitProducerId
    before it aborts an ongoing transaction: a stale epoch fences the current
    one if its transaction is open (Leadership.resign therefore asks first)."""
    output = await cluster.new_topic(1, compacted=False)
    old, new = await cluster.process(), await cluster.process()
    stale = await old.acquire_epoch(role, LEASE)
    successor = await new.acquire_epoch(role, LEASE)
    txn = await new.begin_transaction(role, successor)
    await txn.send(output, b"successor", partition=0)
    # Open at the coordinator once the producer's AddPartitionsToTxn is in,
    # which on Kafka comes a moment after the send returns.
    await polling.eventually(lambda: new.describe_epoch(role),
                             lambda status: status.state == "Ongoing", 30)
    with pytest.raises(FencedError):
        await old.acquire_epoch(role, LEASE, current=stale)
    assert (await new.describe_epoch(role)).token == FencingToken(
        successor.producer_id, successor.producer_epoch + 1)
    with pytest.raises(FencedError):
        await txn.commit()
    assert await committed_values(cluster, output) == []


async def test_a_transaction_open_past_its_timeout_is_aborted_with_a_bump(cluster, role):
    output = await cluster.new_topic(1, compacted=False)
    transport = await cluster.process()
    token = await transport.acquire_epoch(role, TXN_TIMEOUT)
    txn = await transport.begin_transaction(role, token)
    await txn.send(output, b"too slow", partition=0)
    status = await cluster.eventually(lambda: transport.describe_epoch(role),
                                      lambda status: status.token != token)
    assert status.token == FencingToken(token.producer_id, token.producer_epoch + 1)

    async def send_and_commit() -> None:
        await txn.send(output, b"too late", partition=0)
        await txn.commit()

    with pytest.raises(FencedError):
        await send_and_commit()
    with pytest.raises(FencedError):
        await write_lease(transport, role, token, 0, *lease_record(role, token))
    assert await committed_values(cluster, output) == []


# ----------------------------------------------------------------- StateReader


async def test_read_partition_of_an_empty_partition_is_empty(cluster):
    assert await (await cluster.process()).read_partition(0) == PartitionRead([], 0, 0)


async def test_offsets_are_per_partition(cluster, role):
    transport = await cluster.process()
    record = registration_record(role, "a")
    assert [await transport.append(0, *record), await transport.append(1, *record),
            await transport.append(0, *record)] == [0, 0, 1]


async def test_a_commit_marker_takes_an_offset(cluster, role):
    transport = await cluster.process()
    token = await transport.acquire_epoch(role, LEASE)
    assert await write_lease(transport, role, token, 0, *lease_record(role, token)) == 0
    assert await write_lease(transport, role, token, 0, *lease_record(role, token)) == 2


async def test_read_partition_returns_committed_records_in_offset_order(cluster, role):
    transport = await cluster.process()
    token = await transport.acquire_epoch(role, LEASE)
    offsets = [await transport.append(1, *registration_record(role, "a")),
               await write_lease(transport, role, token, 1, *lease_record(role, token)),
               await transport.append(1, *registration_record(role, "b")),
               await write_lease(transport, role, token, 1, *lease_record(role, token, "b"))]
    read = await stable_read(cluster, transport, 1)
    assert [r.offset for r in read.records] == offsets
    assert [(r.key, r.value) for r in read.records] == [
        registration_record(role, "a"), lease_record(role, token),
        registration_record(role, "b"), lease_record(role, token, "b")]


async def test_a_record_carries_its_writers_clock_as_its_timestamp(cluster, role):
    """CreateTime: the producer stamps a record, so a member's skewed clock is
    what its records say (the simulation skews members' clocks this way)."""
    transport = await cluster.process()
    token = await transport.acquire_epoch(role, LEASE)
    before = cluster.now_ms()
    await transport.append(0, *registration_record(role, "a"))
    await write_lease(transport, role, token, 0, *lease_record(role, token))
    after = cluster.now_ms()
    read = await stable_read(cluster, transport, 0)
    assert len(read.records) == 2
    assert all(before <= r.timestamp <= after for r in read.records)


async def test_records_of_an_open_transaction_are_invisible_and_hold_the_stable_offset(
    cluster, role
):
    transport = await cluster.process()
    token = await transport.acquire_epoch(role, LEASE)
    before = await transport.append(0, *registration_record(role, "before"))
    txn = await transport.begin_transaction(role, token)
    open_at = await txn.write_lease(0, *lease_record(role, token))
    after = await transport.append(0, *registration_record(role, "after"))
    try:
        read = await transport.read_partition(0)
        assert [r.offset for r in read.records] == [before]
        assert (read.last_stable_offset, read.high_watermark) == (open_at, after + 1)
    finally:
        await txn.abort()


async def test_committed_transactions_become_visible_in_offset_order(cluster, role):
    transport = await cluster.process()
    token = await transport.acquire_epoch(role, LEASE)
    txn = await transport.begin_transaction(role, token)
    leased = await txn.write_lease(0, *lease_record(role, token))
    after = await transport.append(0, *registration_record(role, "after"))
    await txn.commit()
    read = await stable_read(cluster, transport, 0)
    assert [r.offset for r in read.records] == [leased, after]
    assert read.high_watermark == after + 2  # the commit marker


async def test_aborted_records_stay_invisible(cluster, role):
    transport = await cluster.process()
    token = await transport.acquire_epoch(role, LEASE)
    txn = await transport.begin_transaction(role, token)
    aborted = await txn.write_lease(0, *lease_record(role, token, "aborted"))
    await txn.abort()
    committed = await write_lease(transport, role, token, 0,
                                  *lease_record(role, token, "committed"))
    read = await stable_read(cluster, transport, 0)
    assert [r.offset for r in read.records] == [committed]
    assert aborted < committed


async def test_a_read_from_an_offset_returns_what_a_read_from_0_returns_from_there(
    cluster, role
):
    """Also the records of a transaction that was open at the offset the
    reader held, once it committed: they lie at and above that stable offset."""
    transport = await cluster.process()
    token = await transport.acquire_epoch(role, LEASE)
    await transport.append(0, *registration_record(role, "a"))
    txn = await transport.begin_transaction(role, token)
    leased = await txn.write_lease(0, *lease_record(role, token))
    held = await transport.read_partition(0)
    assert held.last_stable_offset == leased
    after = await transport.append(0, *registration_record(role, "b"))
    await txn.commit()
    whole = await stable_read(cluster, transport, 0)
    since = await transport.read_partition(0, held.last_stable_offset)
    assert [r.offset for r in since.records] == [leased, after]
    assert since.records == [r for r in whole.records if r.offset >= held.last_stable_offset]
    assert (since.last_stable_offset, since.high_watermark) == (
        whole.last_stable_offset, whole.high_watermark)
    beyond = await transport.read_partition(0, whole.high_watermark)
    assert (beyond.records, beyond.last_stable_offset) == ([], whole.last_stable_offset)


async def test_reads_of_one_partition_from_different_offsets_each_get_their_part(cluster, role):
    transport = await cluster.process()
    offsets = [await transport.append(0, *registration_record(role, m)) for m in "abcd"]
    whole = await stable_read(cluster, transport, 0)
    reads = await asyncio.gather(*(transport.read_partition(0, start)
                                   for start in (offsets[2], 0, offsets[1])))
    assert [[r.offset for r in read.records] for read in reads] == [
        offsets[2:], offsets, offsets[1:]]
    assert all(read.records == [r for r in whole.records if r.offset >= start]
               for read, start in zip(reads, (offsets[2], 0, offsets[1]), strict=True))


async def test_a_read_from_a_negative_offset_is_refused(cluster):
    with pytest.raises(ValueError, match="offset"):
        await (await cluster.process()).read_partition(0, -1)


async def test_guarded_sends_to_other_topics_commit_with_the_transaction(cluster, role):
    output = await cluster.new_topic(2, compacted=False)
    transport = await cluster.process()
    reader = await cluster.process(output)
    token = await transport.acquire_epoch(role, LEASE)
    txn = await transport.begin_transaction(role, token)
    await txn.send(output, b"invoice", partition=1)
    assert (await reader.read_partition(1)).records == []
    await txn.commit()
    read = await stable_read(cluster, reader, 1)
    assert [r.value for r in read.records] == [b"invoice"]


async def test_a_keyed_send_without_a_partition_goes_where_kafkas_partitioner_puts_it(
    cluster, role
):
    output = await cluster.new_topic(4, compacted=False)
    transport = await cluster.process()
    reader = await cluster.process(output)
    token = await transport.acquire_epoch(role, LEASE)
    keys = [f"key-{i}".encode() for i in range(8)]
    txn = await transport.begin_transaction(role, token)
    for key in keys:
        await txn.send(output, key, key=key)
    await txn.commit()
    landed = {partition: [r.value for r in (await stable_read(cluster, reader, partition)).records]
              for partition in range(4)}
    assert landed == {partition: [k for k in keys if to_positive(murmur2(k)) % 4 == partition]
                      for partition in range(4)}
    assert len([p for p, values in landed.items() if values]) > 1


async def test_a_tail_returns_records_as_they_are_committed(cluster, role):
    transport = await cluster.process()
    token = await transport.acquire_epoch(role, LEASE)
    start = await transport.append(2, *registration_record(role, "old"))
    tail = await transport.tail(2, start + 1)
    try:
        waiting = asyncio.ensure_future(tail.next())
        offset = await write_lease(transport, role, token, 2, *lease_record(role, token))
        seen: list[int] = []
        while offset not in seen:
            read = await asyncio.wait_for(waiting, 30)
            seen += [r.offset for r in read.records]
            waiting = asyncio.ensure_future(tail.next())
        waiting.cancel()
        assert seen == [offset]
    finally:
        await tail.close()


async def test_a_tail_reports_an_open_transaction_and_wakes_when_it_ends(cluster, role):
    """A transaction's first record holds the stable offset below the high
    watermark; its abort moves the stable offset with no record to return."""
    transport = await cluster.process()
    token = await transport.acquire_epoch(role, LEASE)
    tail = await transport.tail(1, 0)
    txn = await transport.begin_transaction(role, token)
    try:
        open_at = await txn.write_lease(1, *lease_record(role, token))
        read = await asyncio.wait_for(tail.next(), 30)
        while read.high_watermark <= open_at:
            read = await asyncio.wait_for(tail.next(), 30)
        assert (read.records, read.last_stable_offset) == ([], open_at)
        await txn.abort()
        while read.last_stable_offset <= open_at:
            read = await asyncio.wait_for(tail.next(), 30)
            assert read.records == []
        assert read.last_stable_offset == open_at + 2  # past the abort marker
    finally:
        await tail.close()


async def test_a_tail_of_one_role_returns_its_records_and_undecodable_ones_and_nothing_else(
        cluster, role):
    """A waiting candidate follows its role only: another role's records on
    its partition, and the marks they move, do not wake it."""
    transport = await cluster.process()
    other = f"{role}-other"
    everything = await transport.tail(2, 0)
    mine = await transport.tail(2, 0, role=role)
    try:
        token = await transport.acquire_epoch(other, LEASE)
        elsewhere = await write_lease(transport, other, token, 2, *lease_record(other, token))
        read = await asyncio.wait_for(everything.next(), 30)
        while read.last_stable_offset <= elsewhere:  # the other role's lease is committed
            read = await asyncio.wait_for(everything.next(), 30)
        registered = await transport.append(2, *registration_record(role, "a"))
        read = await asyncio.wait_for(mine.next(), 30)
        assert [r.offset for r in read.records] == [registered]
        assert read.last_stable_offset > registered
        assert mine.returned_to() >= read.last_stable_offset
        undecodable = await transport.append(2, b"\x00not a key", b"x")
        read = await asyncio.wait_for(mine.next(), 30)
        assert [r.offset for r in read.records] == [undecodable]
    finally:
        await everything.close()
        await mine.close()


async def test_cancelling_tail_next_loses_no_record(cluster, role):
    transport = await cluster.process()
    token = await transport.acquire_epoch(role, LEASE)
    tail = await transport.tail(3, 0)
    written = [await write_lease(transport, role, token, 3, *lease_record(role, token, f"m{i}"))
               for i in range(20)]
    seen: list[int] = []
    deadline = time.monotonic() + 30
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


# ------------------------------------------------------------------ compaction


async def test_compaction_removes_tombstones_and_superseded_records_and_keeps_offsets(
    cluster, role
):
    topic = await cluster.new_topic(1, eager_compaction=True)
    transport = await cluster.process(topic)
    a, b, c = (registration_record(role, member)[0] for member in "abc")
    written = [await transport.append(0, key, value)
               for key, value in [(a, b"1"), (b, b"1"), (a, b"2"), (c, b"1"), (c, None)]]
    roll = registration_record(role, "roll")[0]

    async def probe() -> list[tuple[int, bytes, bytes | None]]:
        # Kafka compacts only closed segments; an append closes the old one.
        await transport.append(0, roll, b"")
        read = await transport.read_partition(0)
        return [(r.offset, r.key, r.value) for r in read.records if r.key != roll]

    kept = await cluster.eventually(probe, lambda kept: len(kept) == 2)
    assert kept == [(written[1], b, b"1"), (written[2], a, b"2")]


# ----------------------------------------------------------------- check_topic


async def test_check_topic_accepts_the_state_topic_and_reports_the_abort_cleanup_interval(
    cluster
):
    check = await (await cluster.process()).check_topic(cluster.partitions, LEASE)
    assert isinstance(check, TopicCheck)
    assert check.abort_cleanup_interval_ms > 0


async def test_check_topic_refuses_a_missing_topic_and_says_how_to_create_it(cluster):
    transport = await cluster.process(f"contract-never-created-{uuid.uuid4().hex[:6]}")
    with pytest.raises(StateTopicError, match="does not exist") as refused:
        await transport.check_topic(cluster.partitions, LEASE)
    assert "cleanup.policy=compact" in str(refused.value)
    assert "krabka create-topics" in str(refused.value)


async def test_check_topic_refuses_a_topic_that_is_not_compacted(cluster):
    transport = await cluster.process(await cluster.new_topic(compacted=False))
    with pytest.raises(StateTopicError, match=r"cleanup\.policy") as refused:
        await transport.check_topic(cluster.partitions, LEASE)
    assert "must be exactly 'compact'" in str(refused.value)


async def test_check_topic_refuses_another_partition_count(cluster):
    transport = await cluster.process()
    with pytest.raises(StateTopicError, match=f"has {cluster.partitions} partitions") as refused:
        await transport.check_topic(cluster.partitions * 2, LEASE)
    assert f"configure every member with partitions={cluster.partitions}" in str(refused.value)


async def test_check_topic_refuses_a_lease_over_the_transaction_max_timeout(cluster):
    transport = await cluster.process()
    with pytest.raises(StateTopicError, match=r"transaction\.max\.timeout\.ms"):
        await transport.check_topic(cluster.partitions, 3600.0)


# ----------------------------------------------------- token-addressed writes


async def test_a_call_naming_an_old_token_is_fenced_and_leaves_the_newer_producer_alone(
    cluster, role
):
    """A late call of this transport's previous tenure names its token; the
    re-acquired producer holds a newer one, so the call touches nothing."""
    transport = await cluster.process()
    old = await transport.acquire_epoch(role, LEASE)
    new = await transport.acquire_epoch(role, LEASE)
    with pytest.raises(FencedError):
        await transport.begin_transaction(role, old)
    with pytest.raises(FencedError):
        await transport.release(role, old)
    assert (await transport.read_partition(0)).high_watermark == 0
    assert (await transport.describe_epoch(role)).token == new
    offset = await write_lease(transport, role, new, 0, *lease_record(role, new, "newer"))
    read = await stable_read(cluster, transport, 0)
    assert [(r.offset, r.value) for r in read.records] == [
        (offset, lease_record(role, new, "newer")[1])]


async def test_a_process_that_holds_no_producer_for_the_role_is_fenced(cluster, role):
    """Another process's token names the current epoch, but this process
    holds no producer bound to it: nothing is written or closed."""
    holder, other = await cluster.process(), await cluster.process()
    token = await holder.acquire_epoch(role, LEASE)
    with pytest.raises(FencedError):
        await other.begin_transaction(role, token)
    with pytest.raises(FencedError):
        await other.release(role, token)
    assert (await other.read_partition(0)).high_watermark == 0
    await write_lease(holder, role, token, 0, *lease_record(role, token))


async def test_release_closes_the_roles_producer(cluster, role):
    transport = await cluster.process()
    token = await transport.acquire_epoch(role, LEASE)
    await transport.release(role, token)
    with pytest.raises(FencedError):
        await transport.begin_transaction(role, token)
    assert (await transport.describe_epoch(role)).token == token


# --------------------------------------------------------------------- TermLog


def claim_record(role: str, member: str, term: int) -> tuple[bytes, bytes]:
    return (encode_term_key(claim_key(role, member, term)),
            encode_claim(Claim(member, term, 1_700_000_000_000)))


def heartbeat_record(role: str, member: str, term: int) -> tuple[bytes, bytes]:
    return (encode_term_key(heartbeat_key(role)),
            encode_heartbeat(Heartbeat(member, term, 1_700_000_000_000)))


async def test_read_terms_of_an_empty_partition_is_empty(cluster):
    assert await (await cluster.process()).read_terms(0) == PartitionRead([], 0, 0)


async def test_term_offsets_are_per_partition_and_read_terms_returns_them_in_order(
    cluster, role
):
    transport = await cluster.process()
    written = [(0, claim_record(role, "a", 1)), (1, claim_record(role, "b", 1)),
               (0, heartbeat_record(role, "a", 1)), (0, claim_record(role, "b", 2))]
    offsets = [await transport.append_term(partition, *record)
               for partition, record in written]
    assert offsets == [0, 0, 1, 2]
    read = await transport.read_terms(0)
    assert [(r.offset, r.key, r.value) for r in read.records] == [
        (0, *written[0][1]), (1, *written[2][1]), (2, *written[3][1])]
    # Nothing is transactional: the read goes to the end.
    assert (read.last_stable_offset, read.high_watermark) == (3, 3)
    assert [r.offset for r in (await transport.read_terms(1)).records] == [0]
    # The terms topic is its own topic: the state topic holds none of them.
    assert await transport.read_partition(0) == PartitionRead([], 0, 0)


async def test_claims_of_two_processes_get_increasing_offsets_and_read_back_in_that_order(
    cluster, role
):
    """The offset order is the referee: every member reads the same order back."""
    a, b = await cluster.process(), await cluster.process()
    records = {member: [claim_record(role, member, term) for term in range(1, 6)]
               for member in ("a", "b")}

    async def claims(transport, member: str) -> list[int]:
        return [await transport.append_term(3, *record) for record in records[member]]

    offsets = dict(zip("ab", await asyncio.gather(claims(a, "a"), claims(b, "b")), strict=True))
    for member in "ab":  # one after the other: each acknowledged before the next
        assert offsets[member] == sorted(offsets[member])
    assert sorted(offsets["a"] + offsets["b"]) == list(range(10))
    by_offset = {o: r for m in "ab" for o, r in zip(offsets[m], records[m], strict=True)}
    for reader in (a, b, await cluster.process()):
        read = await reader.read_terms(3)
        assert [(r.offset, r.key, r.value) for r in read.records] == [
            (o, *by_offset[o]) for o in range(10)]


async def test_a_terms_tail_wakes_on_a_new_record(cluster, role):
    transport, leader = await cluster.process(), await cluster.process()
    start = await leader.append_term(2, *claim_record(role, "a", 1))
    tail = await transport.tail_terms(2, start + 1)
    try:
        waiting = asyncio.ensure_future(tail.next())
        offset = await leader.append_term(2, *heartbeat_record(role, "a", 1))
        seen: list[tuple[int, bytes]] = []
        while offset not in [o for o, _ in seen]:
            read = await asyncio.wait_for(waiting, 30)
            assert read.last_stable_offset == read.high_watermark
            seen += [(r.offset, r.key) for r in read.records]
            waiting = asyncio.ensure_future(tail.next())
        waiting.cancel()
        assert seen == [(offset, heartbeat_record(role, "a", 1)[0])]
    finally:
        await tail.close()


async def test_a_terms_tail_and_a_state_tail_of_one_partition_stay_apart(cluster, role):
    """The two topics share partition numbers, not records."""
    transport = await cluster.process()
    terms, state = await transport.tail_terms(1, 0), await transport.tail(1, 0)
    try:
        term_offset = await transport.append_term(1, *claim_record(role, "a", 1))
        state_offset = await transport.append(1, *registration_record(role, "a"))
        seen: dict[str, list[bytes]] = {"terms": [], "state": []}
        for name, tail, offset in (("terms", terms, term_offset), ("state", state, state_offset)):
            read = await asyncio.wait_for(tail.next(), 30)
            while offset not in [r.offset for r in read.records]:
                read = await asyncio.wait_for(tail.next(), 30)
            seen[name] = [r.key for r in read.records]
        assert seen == {"terms": [claim_record(role, "a", 1)[0]],
                        "state": [registration_record(role, "a")[0]]}
    finally:
        await terms.close()
        await state.close()


async def test_a_terms_tail_of_one_role_returns_its_records_and_undecodable_ones_and_nothing_else(
        cluster, role):
    """A term-mode member follows its role only: the heartbeats of the other
    roles of its partition do not wake it."""
    transport = await cluster.process()
    other = f"{role}-other"
    everything = await transport.tail_terms(2, 0)
    mine = await transport.tail_terms(2, 0, role=role)
    try:
        elsewhere = [await transport.append_term(2, *record)
                     for record in (claim_record(other, "z", 1), heartbeat_record(other, "z", 1))]
        read = await asyncio.wait_for(everything.next(), 30)
        while read.last_stable_offset <= elsewhere[-1]:
            read = await asyncio.wait_for(everything.next(), 30)
        claimed = await transport.append_term(2, *claim_record(role, "a", 1))
        read = await asyncio.wait_for(mine.next(), 30)
        assert [r.offset for r in read.records] == [claimed]
        assert read.last_stable_offset > claimed
        undecodable = await transport.append_term(2, b"\x00not a key", b"x")
        read = await asyncio.wait_for(mine.next(), 30)
        assert [r.offset for r in read.records] == [undecodable]
    finally:
        await everything.close()
        await mine.close()


async def test_check_terms_topic_accepts_the_terms_topic(cluster):
    check = await (await cluster.process()).check_terms_topic(cluster.partitions)
    assert isinstance(check, TopicCheck)


async def test_check_terms_topic_refuses_a_missing_topic_and_says_how_to_create_it(cluster):
    transport = await cluster.process(
        terms_topic=f"contract-never-created-{uuid.uuid4().hex[:6]}")
    with pytest.raises(StateTopicError, match=r"the terms topic .* does not exist") as refused:
        await transport.check_terms_topic(cluster.partitions)
    assert "krabka create-topics" in str(refused.value)
    assert "--fencing term --terms-topic" in str(refused.value)
    assert "cleanup.policy=compact" in str(refused.value)


async def test_check_terms_topic_refuses_a_delete_policy(cluster):
    """Retention would delete old claims, and terms must never restart."""
    transport = await cluster.process(terms_topic=await cluster.new_topic(compacted=False))
    with pytest.raises(StateTopicError, match=r"the terms topic .* has cleanup\.policy") as refused:
        await transport.check_terms_topic(cluster.partitions)
    assert "must be exactly 'compact'" in str(refused.value)


async def test_check_terms_topic_refuses_another_partition_count(cluster):
    transport = await cluster.process()
    with pytest.raises(StateTopicError,
                       match=rf"the terms topic .* has {cluster.partitions} partitions"):
        await transport.check_terms_topic(cluster.partitions * 2)


async def test_term_mode_round_trip_mints_no_epoch_for_the_role(cluster, role):
    """Claims, heartbeats, reads, checks and outputs need no transaction
    coordinator: the role has no epoch afterwards (DescribeTransactions
    answers TRANSACTIONAL_ID_NOT_FOUND on Kafka)."""
    output = await cluster.new_topic(1, compacted=False)
    transport = await cluster.process()
    await transport.check_topic(cluster.partitions, None)
    await transport.check_terms_topic(cluster.partitions)
    await transport.append(0, *registration_record(role, "a"))
    tail = await transport.tail_terms(0, 0)
    try:
        claimed = await transport.append_term(0, *claim_record(role, "a", 1))
        assert claimed in [r.offset for r in (await transport.read_terms(0)).records]
        await asyncio.wait_for(tail.next(), 30)
    finally:
        await tail.close()
    await transport.append_term(0, *heartbeat_record(role, "a", 1))
    assert await transport.output_partitions(output) == 1
    await transport.write_output(output, 0, None, b"data",
                                 [(TERM_HEADER, encode_term_header(TermStamp(role, 1)))])
    status = await transport.describe_epoch(role)
    assert (status.token, status.state) == (NO_EPOCH, "Unknown")


# ---------------------------------------------------------------- OutputWriter


async def test_output_partitions_counts_a_topics_partitions(cluster):
    transport = await cluster.process()
    assert await transport.output_partitions(await cluster.new_topic(3, compacted=False)) == 3


async def test_output_partitions_of_a_missing_topic_is_a_transport_error(cluster):
    transport = await cluster.process()
    with pytest.raises(TransportError, match="UNKNOWN_TOPIC_OR_PARTITION"):
        await transport.output_partitions(f"contract-never-created-{uuid.uuid4().hex[:6]}")


async def test_output_facts_report_the_cleanup_policy_and_a_missing_topic(cluster):
    transport = await cluster.process()
    compacted = await transport.output_facts(await cluster.new_topic(2))
    assert (compacted.exists, compacted.partitions, compacted.cleanup_policy) == (
        True, 2, "compact")
    deleting = await transport.output_facts(await cluster.new_topic(1, compacted=False))
    assert (deleting.exists, deleting.cleanup_policy) == (True, "delete")
    missing = await transport.output_facts(f"contract-never-created-{uuid.uuid4().hex[:6]}")
    assert not missing.exists


async def test_write_output_keeps_the_partition_and_the_headers_and_returns_the_offset(
    cluster, role
):
    output = await cluster.new_topic(3, compacted=False)
    transport = await cluster.process()
    stamp = encode_term_header(TermStamp(role, 7))
    barrier = encode_term_header(TermStamp(role, 7, barrier=True))
    # In order, duplicates kept: a reader must see a doubled header to refuse it.
    data_headers = [(TERM_HEADER, stamp), ("trace", b"1"), ("trace", b"2"), ("empty", b"")]
    barrier_record = (encode_term_key(barrier_key(role, "a", 7)),
                      encode_barrier(Barrier("a", 7, 1_700_000_000_000)))
    offsets = [
        await transport.write_output(output, 2, *barrier_record, [(TERM_HEADER, barrier)]),
        await transport.write_output(output, 2, b"order-1", b"paid", data_headers),
        await transport.write_output(output, 2, b"order-1", None, []),
        await transport.write_output(output, 0, b"order-2", b"paid", data_headers),
    ]
    assert offsets == [0, 1, 2, 0]
    assert await cluster.records(output, 2) == [
        (0, *barrier_record, [(TERM_HEADER, barrier)]),
        (1, b"order-1", b"paid", data_headers),
        (2, b"order-1", None, []),
    ]
    assert await cluster.records(output, 0) == [(0, b"order-2", b"paid", data_headers)]
    assert await cluster.records(output, 1) == []


async def test_write_output_to_a_missing_topic_or_partition_is_a_transport_error(cluster):
    output = await cluster.new_topic(2, compacted=False)
    transport = await cluster.process()
    with pytest.raises(TransportError, match="UNKNOWN_TOPIC_OR_PARTITION"):
        await transport.write_output(f"contract-never-created-{uuid.uuid4().hex[:6]}", 0,
                                     None, b"lost", [])
    with pytest.raises(TransportError, match="UNKNOWN_TOPIC_OR_PARTITION"):
        await transport.write_output(output, 2, None, b"lost", [])
    with pytest.raises(ValueError, match="a key or a value"):
        await transport.write_output(output, 0, None, None, [])
    assert await cluster.records(output, 0) == []
    assert await cluster.records(output, 1) == []

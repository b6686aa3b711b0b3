"""MemoryTransport: the in-process model of the broker rules the protocol relies on."""

import asyncio
import itertools

import pytest

from coordination import (
    NO_EPOCH,
    FencedError,
    FencingToken,
    Lease,
    ManualClock,
    MemoryBroker,
    MemoryTransport,
    StateTopicError,
    encode_key,
    encode_lease,
    lease_key,
)
from coordination.memory import MAX_EPOCH
from coordination.transport import TopicCheck
from tests.loop import run_ready_callbacks

STATE = "__coordination_state"
ROLE = "billing"
KEY = encode_key(lease_key(ROLE))


def lease_value(token: FencingToken, member: str = "m") -> bytes:
    return encode_lease(Lease(member, token.producer_id, token.producer_epoch, 0, 1))


def new_broker(**options) -> MemoryBroker:
    broker = MemoryBroker(clock=options.pop("clock", ManualClock()), **options)
    broker.create_topic(STATE, 4)
    broker.create_topic("out", 2, compacted=False)
    return broker


def two_clients(broker: MemoryBroker) -> tuple[MemoryTransport, MemoryTransport]:
    return MemoryTransport(broker), MemoryTransport(broker)


async def test_the_first_epoch_of_a_role_is_a_new_producer_id_with_epoch_0():
    transport = MemoryTransport(new_broker())
    assert await transport.acquire_epoch(ROLE, 30) == FencingToken(1000, 0)


async def test_each_acquire_bumps_the_epoch_and_never_reuses_a_value():
    transport = MemoryTransport(new_broker())
    tokens = [await transport.acquire_epoch(ROLE, 30) for _ in range(50)]
    assert len(set(tokens)) == 50
    assert [t.producer_epoch for t in tokens] == list(range(50))


async def test_roles_get_distinct_producer_ids():
    transport = MemoryTransport(new_broker())
    a = await transport.acquire_epoch("a", 30)
    b = await transport.acquire_epoch("b", 30)
    assert a.producer_id != b.producer_id


async def exhaust(transport: MemoryTransport) -> tuple[FencingToken, FencingToken]:
    token = await transport.acquire_epoch(ROLE, 30)
    while token.producer_epoch < MAX_EPOCH:
        token = await transport.acquire_epoch(ROLE, 30)
    return token, await transport.acquire_epoch(ROLE, 30)


async def test_after_epoch_32766_the_role_moves_to_a_larger_producer_id_with_epoch_0():
    transport = MemoryTransport(new_broker())
    last, moved = await exhaust(transport)
    assert last == FencingToken(1000, MAX_EPOCH)
    assert moved == FencingToken(1001, 0)


async def test_after_epoch_32766_the_new_producer_id_may_be_smaller():
    broker = new_broker(producer_ids=iter([5000, 17]))
    transport = MemoryTransport(broker)
    last, moved = await exhaust(transport)
    assert moved == FencingToken(17, 0)
    assert moved < last
    status = await transport.describe_epoch(ROLE)
    assert status.authoritative(moved)
    assert not status.authoritative(last)


async def test_after_the_move_to_a_new_producer_id_the_old_token_is_fenced():
    broker = new_broker(producer_ids=iter([5000, 17]))
    old = MemoryTransport(broker)
    await exhaust(old)
    zombie = MemoryTransport(broker)
    stale = FencingToken(5000, MAX_EPOCH)
    zombie._producers[ROLE] = stale
    with pytest.raises(FencedError):
        await zombie.write_lease(ROLE, stale, 0, KEY, lease_value(stale))


async def test_a_producer_id_is_never_handed_out_twice():
    broker = new_broker(producer_ids=itertools.cycle([7]))
    transport = MemoryTransport(broker)
    await transport.acquire_epoch("a", 30)
    with pytest.raises(RuntimeError, match="twice"):
        await transport.acquire_epoch("b", 30)


async def test_a_lease_write_by_a_superseded_producer_is_fenced():
    old, new = two_clients(new_broker())
    token = await old.acquire_epoch(ROLE, 30)
    await new.acquire_epoch(ROLE, 30)
    with pytest.raises(FencedError):
        await old.write_lease(ROLE, token, 0, KEY, lease_value(token))


async def test_a_call_naming_an_old_token_is_fenced_and_leaves_the_newer_producer_alone():
    """A late call of this transport's previous tenure names its token; the
    re-acquired producer holds a newer one, so the call touches nothing."""
    transport = MemoryTransport(new_broker())
    old = await transport.acquire_epoch(ROLE, 30)
    new = await transport.acquire_epoch(ROLE, 30)
    with pytest.raises(FencedError):
        await transport.write_lease(ROLE, old, 0, KEY, lease_value(old))
    with pytest.raises(FencedError):
        await transport.begin_transaction(ROLE, old)
    with pytest.raises(FencedError):
        await transport.release(ROLE, old)
    assert (await transport.read_partition(0)).high_watermark == 0
    assert (await transport.describe_epoch(ROLE)).token == new
    offset = await transport.write_lease(ROLE, new, 0, KEY, lease_value(new, "newer"))
    assert [r.offset for r in (await transport.read_partition(0)).records] == [offset]


async def test_the_current_producer_writes_and_gets_the_offset():
    transport = MemoryTransport(new_broker())
    token = await transport.acquire_epoch(ROLE, 30)
    assert await transport.write_lease(ROLE, token, 0, KEY, lease_value(token)) == 0
    # the commit marker took offset 1
    assert await transport.write_lease(ROLE, token, 0, KEY, lease_value(token)) == 2


async def test_offsets_are_per_partition():
    transport = MemoryTransport(new_broker())
    assert await transport.append(0, b"k", b"v") == 0
    assert await transport.append(1, b"k", b"v") == 0
    assert await transport.append(0, b"k", b"v") == 1


async def test_records_of_an_open_transaction_are_invisible_and_hold_the_stable_offset():
    transport = MemoryTransport(new_broker())
    token = await transport.acquire_epoch(ROLE, 30)
    await transport.append(0, b"before", b"v")
    txn = await transport.begin_transaction(ROLE, token)
    await txn.write_lease(0, KEY, b"x")
    await transport.append(0, b"after", b"v")
    read = await transport.read_partition(0)
    assert [r.key for r in read.records] == [b"before"]
    assert (read.last_stable_offset, read.high_watermark) == (1, 3)


async def test_committed_transactions_become_visible_in_offset_order():
    transport = MemoryTransport(new_broker())
    token = await transport.acquire_epoch(ROLE, 30)
    txn = await transport.begin_transaction(ROLE, token)
    await txn.write_lease(0, KEY, b"x")
    await transport.append(0, b"after", b"v")
    await txn.commit()
    read = await transport.read_partition(0)
    assert [r.offset for r in read.records] == [0, 1]
    assert read.last_stable_offset == read.high_watermark == 3


async def test_aborted_records_stay_invisible():
    transport = MemoryTransport(new_broker())
    token = await transport.acquire_epoch(ROLE, 30)
    txn = await transport.begin_transaction(ROLE, token)
    await txn.write_lease(0, KEY, b"x")
    await txn.abort()
    read = await transport.read_partition(0)
    assert read.records == []
    assert read.last_stable_offset == 2


async def test_guarded_sends_to_other_topics_commit_with_the_transaction():
    broker = new_broker()
    transport = MemoryTransport(broker)
    token = await transport.acquire_epoch(ROLE, 30)
    txn = await transport.begin_transaction(ROLE, token)
    await txn.send("out", b"invoice", partition=1)
    assert broker.partition("out", 1).read_committed(0).records == []
    await txn.commit()
    assert [r.value for r in broker.partition("out", 1).read_committed(0).records] == [b"invoice"]


async def test_a_challenge_during_an_open_transaction_aborts_it_with_an_extra_bump():
    broker = new_broker()
    old, new = two_clients(broker)
    first = await old.acquire_epoch(ROLE, 30)
    txn = await old.begin_transaction(ROLE, first)
    await txn.send("out", b"zombie", partition=0)
    token = await new.acquire_epoch(ROLE, 30)
    assert token == FencingToken(first.producer_id, first.producer_epoch + 2)
    with pytest.raises(FencedError):
        await txn.commit()
    assert broker.partition("out", 0).read_committed(0).records == []


async def test_a_conditional_bump_with_the_current_token_bumps():
    transport = MemoryTransport(new_broker())
    token = await transport.acquire_epoch(ROLE, 30)
    bumped = await transport.acquire_epoch(ROLE, 30, current=token)
    assert bumped == FencingToken(token.producer_id, token.producer_epoch + 1)
    with pytest.raises(FencedError):  # the resigned token cannot write any more
        await transport.begin_transaction(ROLE, token)


async def test_a_conditional_bump_moves_the_producer_to_the_new_epoch():
    transport = MemoryTransport(new_broker())
    token = await transport.acquire_epoch(ROLE, 30)
    bumped = await transport.acquire_epoch(ROLE, 30, current=token)
    txn = await transport.begin_transaction(ROLE, bumped)
    await txn.send("out", b"after the bump", partition=0)
    await txn.commit()
    await transport.release(ROLE, bumped)


async def test_a_conditional_bump_with_a_stale_token_is_fenced_and_bumps_nothing():
    old, new = two_clients(new_broker())
    stale = await old.acquire_epoch(ROLE, 30)
    current = await new.acquire_epoch(ROLE, 30)
    with pytest.raises(FencedError):
        await old.acquire_epoch(ROLE, 30, current=stale)
    assert (await new.describe_epoch(ROLE)).token == current


async def test_a_conditional_bump_with_a_stale_epoch_aborts_the_current_epochs_open_transaction():
    """As Kafka 4.4.0 does (tests/test_kafka_transport.py shows it): it checks
    only the producer id before aborting an ongoing transaction."""
    old, new = two_clients(new_broker())
    stale = await old.acquire_epoch(ROLE, 30)
    current = await new.acquire_epoch(ROLE, 30)
    txn = await new.begin_transaction(ROLE, current)
    await txn.send("out", b"successor", partition=0)
    with pytest.raises(FencedError):
        await old.acquire_epoch(ROLE, 30, current=stale)
    assert (await new.describe_epoch(ROLE)).token == FencingToken(
        current.producer_id, current.producer_epoch + 1)
    with pytest.raises(FencedError):
        await txn.commit()


async def test_a_transaction_open_past_its_timeout_is_aborted_with_a_bump():
    clock = ManualClock()
    broker = new_broker(clock=clock)
    transport = MemoryTransport(broker)
    token = await transport.acquire_epoch(ROLE, 3.0)
    txn = await transport.begin_transaction(ROLE, token)
    await txn.send("out", b"slow", partition=0)
    clock.advance(3.001)
    status = await transport.describe_epoch(ROLE)
    assert status.token == FencingToken(token.producer_id, token.producer_epoch + 1)
    assert status.state == "CompleteAbort"
    with pytest.raises(FencedError):
        await txn.commit()


async def test_an_invalid_transaction_timeout_is_refused():
    transport = MemoryTransport(new_broker(transaction_max_timeout=60))
    with pytest.raises(ValueError, match="INVALID_TRANSACTION_TIMEOUT"):
        await transport.acquire_epoch(ROLE, 61)


async def test_describing_a_role_no_member_has_taken_reports_no_epoch():
    status = await MemoryTransport(new_broker()).describe_epoch("never")
    assert status.token == NO_EPOCH
    assert not status.authoritative(NO_EPOCH)


async def test_compaction_keeps_the_latest_record_of_each_key_at_its_offset():
    broker = new_broker()
    transport = MemoryTransport(broker)
    for key, value in [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"c", b"1"), (b"c", None)]:
        await transport.append(0, key, value)
    broker.compact(STATE)
    read = await transport.read_partition(0)
    assert [(r.offset, r.key, r.value) for r in read.records] == [(1, b"b", b"1"), (2, b"a", b"2")]
    assert read.high_watermark == 5


async def test_compaction_leaves_open_transactions_alone():
    broker = new_broker()
    transport = MemoryTransport(broker)
    token = await transport.acquire_epoch(ROLE, 30)
    txn = await transport.begin_transaction(ROLE, token)
    await txn.write_lease(0, KEY, b"x")
    broker.compact(STATE)
    await txn.commit()
    assert [r.value for r in (await transport.read_partition(0)).records] == [b"x"]


async def test_a_tail_returns_records_as_they_are_committed():
    transport = MemoryTransport(new_broker())
    await transport.append(0, b"old", b"v")
    tail = await transport.tail(0, 1)
    await tail.next()  # the position as it stands
    waiting = asyncio.create_task(tail.next())
    await run_ready_callbacks()
    assert not waiting.done()
    await transport.append(0, b"new", b"v")
    read = await asyncio.wait_for(waiting, timeout=5)
    assert [r.key for r in read.records] == [b"new"]


async def test_a_tail_wakes_when_the_stable_offset_moves_without_new_records():
    transport = MemoryTransport(new_broker())
    token = await transport.acquire_epoch(ROLE, 30)
    tail = await transport.tail(0, 0)
    await tail.next()
    txn = await transport.begin_transaction(ROLE, token)
    await txn.write_lease(0, KEY, b"x")
    stuck = await asyncio.wait_for(tail.next(), timeout=5)
    assert (stuck.records, stuck.last_stable_offset, stuck.high_watermark) == ([], 0, 1)
    await txn.abort()
    moved = await asyncio.wait_for(tail.next(), timeout=5)
    assert moved.last_stable_offset == 2


async def test_check_topic_accepts_the_configured_topic_and_reports_the_abort_cleanup_interval():
    transport = MemoryTransport(new_broker(abort_cleanup_interval=10))
    assert await transport.check_topic(4, 30) == TopicCheck(abort_cleanup_interval_ms=10_000)


async def test_check_topic_refuses_a_missing_topic():
    transport = MemoryTransport(MemoryBroker())
    with pytest.raises(StateTopicError, match="does not exist"):
        await transport.check_topic(4, 30)


async def test_check_topic_refuses_another_partition_count():
    with pytest.raises(StateTopicError, match="has 4 partitions, configured 16"):
        await MemoryTransport(new_broker()).check_topic(16, 30)


async def test_check_topic_refuses_a_topic_that_is_not_compacted():
    transport = MemoryTransport(new_broker(), topic="out")
    with pytest.raises(StateTopicError, match="compacted"):
        await transport.check_topic(2, 30)


async def test_check_topic_refuses_a_lease_longer_than_the_transaction_timeout_limit():
    transport = MemoryTransport(new_broker(transaction_max_timeout=10))
    with pytest.raises(StateTopicError, match=r"transaction\.max\.timeout\.ms"):
        await transport.check_topic(4, 30)


async def test_writing_a_lease_without_an_acquired_epoch_is_fenced():
    transport = MemoryTransport(new_broker())
    with pytest.raises(FencedError):
        await transport.write_lease(ROLE, FencingToken(1000, 0), 0, KEY, b"x")

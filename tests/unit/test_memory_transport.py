"""MemoryBroker's own knobs: producer-id blocks, epoch exhaustion, cleanup timing.

What both transports must do alike is tests/kafka/test_transport_contract.py;
this file holds what only the in-memory model has or can reach (32766
epochs, a chosen producer-id sequence, a cleaner run on demand).
"""

import itertools

import pytest

from krabka import (
    STATE_TOPIC,
    FencedError,
    FencingToken,
    Lease,
    StateTopicError,
    encode_key,
    encode_lease,
    lease_key,
)
from krabka.testing import ManualClock, MemoryBroker, MemoryTransport
from krabka.testing.memory import MAX_EPOCH
from krabka.transport import TopicCheck
from tests.support.lease_io import write_lease

STATE = STATE_TOPIC
ROLE = "billing"
KEY = encode_key(lease_key(ROLE))


def lease_value(token: FencingToken, member: str = "m") -> bytes:
    return encode_lease(Lease(member, token.producer_id, token.producer_epoch, 0, 1))


def new_broker(**options) -> MemoryBroker:
    broker = MemoryBroker(clock=options.pop("clock", ManualClock()), **options)
    broker.create_topic(STATE, 4)
    broker.create_topic("out", 2, compacted=False)
    return broker


async def test_the_first_epoch_of_a_role_is_a_new_producer_id_with_epoch_0():
    transport = MemoryTransport(new_broker())
    assert await transport.acquire_epoch(ROLE, 30) == FencingToken(1000, 0)


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
        await write_lease(zombie, ROLE, stale, 0, KEY, lease_value(stale))


async def test_a_producer_id_is_never_handed_out_twice():
    broker = new_broker(producer_ids=itertools.cycle([7]))
    transport = MemoryTransport(broker)
    await transport.acquire_epoch("a", 30)
    with pytest.raises(RuntimeError, match="twice"):
        await transport.acquire_epoch("b", 30)


async def test_without_an_abort_cleanup_interval_a_timed_out_transaction_is_aborted_at_once():
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


async def test_a_timed_out_transaction_is_aborted_at_the_next_abort_cleanup_pass():
    clock = ManualClock(start_ms=1_000_000)
    transport = MemoryTransport(new_broker(clock=clock, abort_cleanup_interval=1.0))
    token = await transport.acquire_epoch(ROLE, 3.0)
    txn = await transport.begin_transaction(ROLE, token)
    await txn.send("out", b"slow", partition=0)
    clock.advance_ms(3_999)  # timed out at 1_003_001; the next pass runs at 1_004_000
    assert (await transport.describe_epoch(ROLE)).state == "Ongoing"
    clock.advance_ms(1)
    assert (await transport.describe_epoch(ROLE)).state == "CompleteAbort"


async def test_a_transaction_timeout_over_the_broker_maximum_is_a_state_topic_error():
    transport = MemoryTransport(new_broker(transaction_max_timeout=60))
    with pytest.raises(StateTopicError, match="INVALID_TRANSACTION_TIMEOUT"):
        await transport.acquire_epoch(ROLE, 61)


async def test_a_transaction_timeout_that_is_not_positive_is_a_value_error():
    transport = MemoryTransport(new_broker())
    with pytest.raises(ValueError, match="positive"):
        await transport.acquire_epoch(ROLE, 0)



async def test_compaction_leaves_open_transactions_alone():
    broker = new_broker()
    transport = MemoryTransport(broker)
    token = await transport.acquire_epoch(ROLE, 30)
    txn = await transport.begin_transaction(ROLE, token)
    await txn.write_lease(0, KEY, b"x")
    broker.compact(STATE)
    await txn.commit()
    assert [r.value for r in (await transport.read_partition(0)).records] == [b"x"]


async def test_check_topic_accepts_the_configured_topic_and_reports_the_abort_cleanup_interval():
    transport = MemoryTransport(new_broker(abort_cleanup_interval=10))
    assert await transport.check_topic(4, 30) == TopicCheck(abort_cleanup_interval_ms=10_000)


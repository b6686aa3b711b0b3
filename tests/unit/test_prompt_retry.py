"""A role producer asks again soon after CONCURRENT_TRANSACTIONS, and no more
often than aiokafka would once the first retries are spent.

The sender's real handlers run against a fake network: each test answers
AddPartitionsToTxn or InitProducerId with given error codes and records how
long the sender waits before asking again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.structs import TopicPartition

from krabka.kafka import KafkaTransport
from krabka.kafka.options import ClientOptions
from krabka.kafka.producer.coordinators import TransactionCoordinators
from krabka.kafka.protocol.messages import (
    CONCURRENT_TRANSACTIONS,
    COORDINATOR_LOAD_IN_PROGRESS,
    InitProducerIdResponse_v3,
)

PARTITION = TopicPartition("state", 0)
AIOKAFKA_WAIT = 0.02
"""The role producers' retry_backoff_ms, and aiokafka's wait between transactions."""


class Waits:
    """Stands in for asyncio.sleep and keeps every wait asked of it."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    async def __call__(self, delay: float, result: Any = None) -> Any:
        self.seconds.append(delay)
        return result


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> Waits:
    recorded = Waits()
    monkeypatch.setattr(asyncio, "sleep", recorded)
    return recorded


def answers(responses: list[Any]) -> Any:
    replies: Iterator[Any] = iter(responses)

    async def send(node_id: int, request: Any, **_: Any) -> Any:
        return next(replies)

    return send


@pytest.fixture
async def producers() -> AsyncIterator[list[Any]]:
    built: list[Any] = []
    yield built
    for producer in built:
        await producer.stop()


@pytest.fixture
def role_sender(producers: list[Any]) -> Callable[[list[Any]], Any]:
    return lambda responses: build_role_sender(producers, responses)


def build_role_sender(producers: list[Any], responses: list[Any]) -> Any:
    """The sender of a role producer the transport builds, its network faked."""
    transport = KafkaTransport("127.0.0.1:1", topic="state")
    producer = transport._role_producer("role", 3000)
    producers.append(producer)
    sender = producer._sender

    async def coordinator(*_: Any) -> int:
        return 1

    sender._find_coordinator = coordinator
    sender.client.send = answers(responses)
    return sender


def begin_writing(sender: Any) -> None:
    """A transaction begins and its first record names PARTITION."""
    sender._txn_manager.begin_transaction()
    sender._txn_manager.maybe_add_partition_to_txn(PARTITION)


def added(*codes: int) -> list[Any]:
    return [SimpleNamespace(errors=[(PARTITION.topic, [(PARTITION.partition, code)])])
            for code in codes]


def minted(*codes: int) -> list[Any]:
    return [SimpleNamespace(error_code=code, producer_id=7, producer_epoch=3) for code in codes]


async def test_a_transaction_begun_while_the_last_one_completes_is_retried_after_half_a_ms_doubling(
    waits: Waits, role_sender: Callable[[list[Any]], Any],
) -> None:
    sender = role_sender(added(*[CONCURRENT_TRANSACTIONS] * 8, 0))
    sender._txn_manager.set_pid_and_epoch(7, 0)
    begin_writing(sender)
    outcomes = [await sender._do_add_partitions_to_txn({PARTITION}) for _ in range(9)]
    assert outcomes == [False] * 8 + [True]
    assert waits.seconds == pytest.approx([0.0005, 0.001, 0.002, 0.004, 0.008, 0.016,
                                           AIOKAFKA_WAIT, AIOKAFKA_WAIT])


async def test_the_prompt_retries_start_again_after_the_partition_is_added(
    waits: Waits, role_sender: Callable[[list[Any]], Any],
) -> None:
    sender = role_sender(added(CONCURRENT_TRANSACTIONS, CONCURRENT_TRANSACTIONS, 0))
    sender._txn_manager.set_pid_and_epoch(7, 0)
    begin_writing(sender)
    for _ in range(3):
        await sender._do_add_partitions_to_txn({PARTITION})
    sender._txn_manager.committing_transaction()
    sender._txn_manager.complete_transaction()
    begin_writing(sender)
    sender.client.send = answers(added(CONCURRENT_TRANSACTIONS, 0))
    for _ in range(2):
        await sender._do_add_partitions_to_txn({PARTITION})
    assert waits.seconds == pytest.approx([0.0005, 0.001, 0.0005])


async def test_other_answers_to_add_partitions_keep_aiokafkas_wait(
    waits: Waits, role_sender: Callable[[list[Any]], Any],
) -> None:
    sender = role_sender(added(COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_LOAD_IN_PROGRESS))
    sender._txn_manager.set_pid_and_epoch(7, 0)
    begin_writing(sender)
    for _ in range(2):
        await sender._do_add_partitions_to_txn({PARTITION})
    assert waits.seconds == pytest.approx([AIOKAFKA_WAIT, AIOKAFKA_WAIT])


async def test_an_epoch_minted_while_the_dead_leaders_transaction_aborts_is_asked_again_soon(
    waits: Waits, role_sender: Callable[[list[Any]], Any],
) -> None:
    sender = role_sender(minted(CONCURRENT_TRANSACTIONS, CONCURRENT_TRANSACTIONS, 0))
    outcomes = [await sender._do_init_pid(1) for _ in range(3)]
    assert outcomes == [False, False, True]
    assert waits.seconds == pytest.approx([0.0005, 0.001])
    assert (sender._txn_manager.producer_id, sender._txn_manager.producer_epoch) == (7, 3)


async def test_a_conditional_bump_answered_concurrent_transactions_is_asked_again_after_2_ms(
    waits: Waits,
) -> None:
    coordinators = TransactionCoordinators(ClientOptions("127.0.0.1:1", {}), timeout=5,
                                           servers="127.0.0.1:1")

    async def lookup(*_: Any) -> int:
        return 1

    reply = [InitProducerIdResponse_v3(throttle_time_ms=0, error_code=code, producer_id=7,
                                       producer_epoch=epoch, tags={})
             for code, epoch in ((CONCURRENT_TRANSACTIONS, -1), (0, 4))]
    coordinators._client = SimpleNamespace(coordinator_lookup=lookup, send=answers(reply),
                                           force_metadata_update=lambda: None)
    result = await coordinators.init_producer_id("role", 3000, 7, 3)
    assert (result.error_code, result.producer_epoch) == (0, 4)
    assert waits.seconds == pytest.approx([0.002])

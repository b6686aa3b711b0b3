"""A role producer retries CONCURRENT_TRANSACTIONS after 0.5 ms, doubling, not a flat 20 ms.

The transaction coordinator answers CONCURRENT_TRANSACTIONS (51) while a
transactional id's previous transaction is still completing. Two moments of
every failover meet it:

* right after a new leader's first lease commits, its first guarded write
  begins a transaction while the lease's commit markers are still being
  written (AddPartitionsToTxn; KAFKA-5477);
* after a crash, the successor's InitProducerId must first abort the dead
  leader's open transaction.

Completing takes one to a few milliseconds on a healthy cluster, so the
first retry comes after half a millisecond: starting at 2 ms left a new
leader's first guarded write waiting about a millisecond longer than the
markers took (docs/decisions/0045-concurrent-transactions-is-retried.md).
aiokafka waits a
flat 20 ms before it asks again (its ``BACKOFF_OVERRIDE`` for the first case,
the producer's ``retry_backoff_ms`` for the second), and has no setting for
either: the bench's logs showed these 20 ms steps in the tails of handover
and failover. `make_prompt` gives one role producer's sender handlers that
retry those two answers after 0.5, 1, 2, 4, 8 and 16 ms, then after
aiokafka's own backoff: after the first six retries it asks no more often
than aiokafka would, so a transaction that stays incomplete (a partition leader gone) does
not become a flood of requests. Every other answer, and every other
producer, keeps aiokafka's behaviour.

The handlers subclass aiokafka's sender internals, listed in
`krabka.kafka.aiokafka_internals` and checked by a unit test.
"""

from __future__ import annotations

from typing import Any

from aiokafka.client import CoordinationType  # type: ignore[import-untyped, unused-ignore]
from aiokafka.producer import sender as _sender  # type: ignore[import-untyped, unused-ignore]

from krabka.kafka.protocol.messages import CONCURRENT_TRANSACTIONS

__all__ = ["FIRST_RETRY", "RetrySchedule", "make_prompt"]

FIRST_RETRY = 0.0005
"""Seconds before the first retry of a CONCURRENT_TRANSACTIONS answer."""


class RetrySchedule:
    """The waits of one run of CONCURRENT_TRANSACTIONS answers: `FIRST_RETRY`,
    doubling, never longer than the wait aiokafka chose."""

    def __init__(self) -> None:
        self.retries = 0

    def next(self, ceiling: float) -> float:
        delay = min(FIRST_RETRY * 2.0 ** self.retries, ceiling)
        self.retries += 1
        return delay

    def reset(self) -> None:
        self.retries = 0


def _only_concurrent(codes: list[int]) -> bool:
    failed = {code for code in codes if code != 0}
    return failed == {CONCURRENT_TRANSACTIONS}


class _PromptAddPartitions(_sender.AddPartitionsToTxnHandler):  # type: ignore[misc]
    def __init__(self, sender: Any, partitions: Any, schedule: RetrySchedule) -> None:
        super().__init__(sender, partitions)
        self._schedule = schedule

    def handle_response(self, response: Any) -> float | None:
        # aiokafka shortens its wait only while the transaction has no
        # partition yet (the previous one is completing): so does this.
        completing = not self._sender._txn_manager.txn_partitions and _only_concurrent(
            [code for _, partitions in response.errors for _, code in partitions])
        backoff: float | None = super().handle_response(response)
        if backoff is None or not completing:
            self._schedule.reset()
            return backoff
        return self._schedule.next(backoff)


class _PromptInitPid(_sender.InitPIDHandler):  # type: ignore[misc]
    def __init__(self, sender: Any, schedule: RetrySchedule) -> None:
        super().__init__(sender)
        self._schedule = schedule

    def handle_response(self, response: Any) -> float | None:
        backoff: float | None = super().handle_response(response)
        if backoff is None or response.error_code != CONCURRENT_TRANSACTIONS:
            self._schedule.reset()
            return backoff
        return self._schedule.next(backoff)


def make_prompt(producer: Any) -> None:
    """Give `producer` (a transactional AIOKafkaProducer, not started) the prompt retries."""
    sender = producer._sender
    adding, initialising = RetrySchedule(), RetrySchedule()

    async def add_partitions_to_txn(partitions: Any) -> bool:
        node_id = await sender._find_coordinator(
            CoordinationType.TRANSACTION, sender._txn_manager.transactional_id)
        done: bool = await _PromptAddPartitions(sender, partitions, adding).do(node_id)
        return done

    async def init_pid(node_id: int) -> bool:
        done: bool = await _PromptInitPid(sender, initialising).do(node_id)
        return done

    # Instance attributes shadow the Sender's methods of the same names,
    # which its loops call through ``self``.
    sender._do_add_partitions_to_txn = add_partitions_to_txn
    sender._do_init_pid = init_pid

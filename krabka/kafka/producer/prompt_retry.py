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

The sender's handlers are replaced by
`krabka.kafka.aiokafka_internals.override_transaction_backoffs`; this module
chooses the waits.
"""

from __future__ import annotations

from typing import Any

from krabka.kafka.aiokafka_internals import override_transaction_backoffs
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


def make_prompt(producer: Any) -> None:
    """Give `producer` (a transactional AIOKafkaProducer, not started) the prompt retries."""
    adding, initialising = RetrySchedule(), RetrySchedule()

    def add_partitions(response: Any, backoff: float | None, first: bool) -> float | None:
        # aiokafka shortens its wait only while the transaction has no
        # partition yet (the previous one is completing): so does this.
        completing = first and _only_concurrent(
            [code for _, partitions in response.errors for _, code in partitions])
        if backoff is None or not completing:
            adding.reset()
            return backoff
        return adding.next(backoff)

    def init_pid(response: Any, backoff: float | None) -> float | None:
        if backoff is None or response.error_code != CONCURRENT_TRANSACTIONS:
            initialising.reset()
            return backoff
        return initialising.next(backoff)

    override_transaction_backoffs(producer, add_partitions, init_pid)

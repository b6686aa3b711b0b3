"""The state-topic policy both transports apply to the facts they report.

The refusals are part of the transport contract (tests/kafka/test_transport_contract.py
runs them on both transports); here are the warnings, which only log, and
the Kafka adapter's cache of the facts.
"""

from __future__ import annotations

import logging

import pytest

from krabka import StateTopicError
from krabka.kafka.admin import TopicChecker
from krabka.kafka.options import ClientOptions
from krabka.topic_policy import StateTopicPolicy, TopicCheck, TopicFacts

WELL_SET = TopicFacts("state", "k:9092", exists=True, partitions=4, cleanup_policy="compact",
                      replication=3, min_insync_replicas=2, segment_ms=60_000,
                      transaction_max_timeout_ms=900_000, abort_cleanup_interval_ms=1_000)


def policy_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "krabka.topic"]


def with_(**changes: object) -> TopicFacts:
    fields = {name: getattr(WELL_SET, name) for name in TopicFacts.__slots__}
    return TopicFacts(**{**fields, **changes})  # type: ignore[arg-type]


def test_a_well_set_topic_passes_without_a_warning(caplog):
    caplog.set_level(logging.WARNING)
    assert StateTopicPolicy().check(WELL_SET, 4, 30) == TopicCheck(1_000)
    assert policy_warnings(caplog) == []


def test_weak_durability_and_long_segments_warn_once_per_transport(caplog):
    caplog.set_level(logging.WARNING)
    policy = StateTopicPolicy()
    facts = with_(replication=1, min_insync_replicas=1, segment_ms=604_800_000)
    policy.check(facts, 4, 30)
    policy.check(facts, 4, 30)
    warned = policy_warnings(caplog)
    assert len(warned) == 3
    assert "replication factor 1" in warned[0]
    assert "min.insync.replicas=1" in warned[1]
    assert "segment.ms=604800000" in warned[2]


def test_a_slow_abort_cleanup_warns_once_for_each_lease_it_is_not_well_below(caplog):
    caplog.set_level(logging.WARNING)
    policy = StateTopicPolicy()
    facts = with_(abort_cleanup_interval_ms=10_000)
    policy.check(facts, 4, 30)  # 3 x 10 s is not above a 30 s lease: fine
    policy.check(facts, 4, 20)
    policy.check(facts, 4, 20)
    policy.check(facts, 4, 10)
    policy.check(facts, 4, None)  # a reader holds no lease
    warned = policy_warnings(caplog)
    assert len(warned) == 2
    assert all("not well below the lease" in message for message in warned)
    assert "(20000 ms)" in warned[0]
    assert "(10000 ms)" in warned[1]


def test_a_refused_topic_logs_nothing(caplog):
    caplog.set_level(logging.WARNING)
    with pytest.raises(StateTopicError, match=r"cleanup\.policy='delete'"):
        StateTopicPolicy().check(with_(cleanup_policy="delete", replication=1), 4, 30)
    assert policy_warnings(caplog) == []


def test_without_a_partition_count_the_count_is_not_checked():
    assert StateTopicPolicy().check(WELL_SET, None, None) == TopicCheck(1_000)


class CountingChecker(TopicChecker):
    """A checker whose cluster answers from a list, counting the questions."""

    def __init__(self, answers: list[TopicFacts], cache_seconds: float) -> None:
        super().__init__(ClientOptions("127.0.0.1:9", {}), timeout=1,
                         servers="127.0.0.1:9", cache_seconds=cache_seconds)
        self.answers = answers
        self.fetches: list[str] = []

    async def _fetch(self, topic: str) -> TopicFacts:
        self.fetches.append(topic)
        return self.answers.pop(0)


async def test_the_kafka_checker_caches_the_facts_of_an_existing_topic():
    checker = CountingChecker([WELL_SET, with_(partitions=8)], cache_seconds=30)
    assert await checker.facts("state") == WELL_SET
    assert await checker.facts("state") == WELL_SET
    assert checker.fetches == ["state"]


async def test_the_kafka_checker_caches_each_topic_on_its_own():
    terms = TopicFacts("terms", "127.0.0.1:9", exists=True, partitions=4)
    checker = CountingChecker([WELL_SET, terms], cache_seconds=30)
    assert await checker.facts("state") == WELL_SET
    assert await checker.facts("terms") == terms
    assert await checker.facts("state") == WELL_SET
    assert checker.fetches == ["state", "terms"]


async def test_the_kafka_checker_asks_again_once_the_cache_is_stale():
    checker = CountingChecker([WELL_SET, with_(partitions=8)], cache_seconds=-1)  # always stale
    await checker.facts("state")
    assert (await checker.facts("state")).partitions == 8


async def test_the_kafka_checker_does_not_cache_a_missing_topic():
    missing = TopicFacts("state", "127.0.0.1:9", exists=False)
    checker = CountingChecker([missing, WELL_SET], cache_seconds=30)
    assert not (await checker.facts("state")).exists
    assert await checker.facts("state") == WELL_SET

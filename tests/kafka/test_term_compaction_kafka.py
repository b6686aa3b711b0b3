"""The terms topic stays bounded by its roles, not its claims, on the real broker
(docs/term-mode.md#a-bounded-terms-topic).

A role changes hands 200 times (CI's size) on a terms topic the cleaner compacts at once
(short ``segment.ms``, ``min.cleanable.dirty.ratio=0.01``, a short
``delete.retention.ms``). Each winner tombstones the claims its win settled,
so after compaction the role's records are its last winning claim and its
heartbeat; the term-mode authority check still answers the highest term, and
the next claim takes the term after it.

The long run, outside CI: ``TERM_HANDOVERS=10000 python -m pytest
tests/kafka/test_term_compaction_kafka.py`` (one hand-over takes 20 to 40 ms).
"""

from __future__ import annotations

import os
import uuid

import pytest

from krabka import TermToken, acquire_leadership, describe_leadership
from krabka.format.terms import (
    Heartbeat,
    TermKind,
    decode_term_key,
    encode_heartbeat,
    encode_term_key,
    heartbeat_key,
)
from krabka.kafka import KafkaTransport
from tests.support.kafka_io import create_state_and_output_topics, terms_topic_of
from tests.support.polling import eventually
from tests.support.transport_backends import EAGER_COMPACTION

pytestmark = pytest.mark.integration

HANDOVERS = int(os.environ.get("TERM_HANDOVERS", "200"))
TIMING = {"lease_duration": 3.0, "renew_interval": 1.0, "challenge_stagger": 0.5}
WITHIN = 60.0


async def test_a_role_that_changed_hands_many_times_keeps_two_records_after_compaction(
        kafka_bootstrap):
    state, _ = await create_state_and_output_topics(kafka_bootstrap, 1,
                                                    state_configs=EAGER_COMPACTION)
    transport = KafkaTransport(kafka_bootstrap, topic=state, terms_topic=terms_topic_of(state))
    role = f"test.compacted-{uuid.uuid4().hex[:8]}"
    try:
        for n in range(HANDOVERS):
            leader = await acquire_leadership(transport, role, "ab"[n % 2], partitions=1,
                                              fencing="term", **TIMING)
            assert leader.token == TermToken(n + 1)
            await leader.resign()
        roll_key = encode_term_key(heartbeat_key(f"{role}.roll"))
        roll_value = encode_heartbeat(Heartbeat("roll", 1, 0, False))

        async def kept() -> list[tuple[int, str, int]]:
            # Kafka cleans closed segments only: an append closes the active one.
            await transport.append_term(0, roll_key, roll_value)
            keys = [decode_term_key(r.key) for r in (await transport.read_terms(0)).records]
            return [(k.kind, k.member, k.term) for k in keys if k.role == role]

        last = "ab"[(HANDOVERS - 1) % 2]
        assert await eventually(kept, lambda found: len(found) <= 2, WITHIN) == [
            (TermKind.CLAIM, last, HANDOVERS), (TermKind.HEARTBEAT, "", 0)]
        status = await describe_leadership(transport, role, fencing="term", partitions=1)
        assert (status.token, status.holder, status.resigned) == (
            TermToken(HANDOVERS), last, True)
        again = await acquire_leadership(transport, role, "c", partitions=1, fencing="term",
                                         **TIMING)
        assert again.token == TermToken(HANDOVERS + 1)
        await again.resign()
    finally:
        await transport.close()

"""The library on uvloop, against the real broker.

A process that holds thousands of roles runs them on uvloop (docs/deploy.md,
"Many roles in one process"): the same tenure, renewals, handover and fence
as on asyncio's own loop, nothing in the library chosen by loop type.
"""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from krabka import acquire_leadership, describe_leadership
from krabka.kafka import KafkaTransport
from tests.support.kafka_io import committed_values, create_state_and_output_topics
from tests.support.polling import eventually

pytestmark = pytest.mark.integration

TIMING = {"lease_duration": 3.0, "renew_interval": 0.02, "challenge_stagger": 0.5}


def test_on_uvloop_a_leader_renews_hands_over_and_its_old_token_loses_authority(
        kafka_bootstrap):
    async def scenario() -> None:
        assert isinstance(asyncio.get_running_loop(), uvloop.Loop)
        state, output = await create_state_and_output_topics(kafka_bootstrap, 4)
        role = "test.uvloop"
        async with (KafkaTransport(kafka_bootstrap, topic=state) as a,
                    KafkaTransport(kafka_bootstrap, topic=state) as b,
                    KafkaTransport(kafka_bootstrap, topic=state) as observer):
            first = await acquire_leadership(a, role, "a", partitions=4, **TIMING)
            renewals: list[float] = []
            first.on_renewed = lambda _lease, latency: renewals.append(latency)

            async def renewed_so_far() -> int:
                return len(renewals)

            await eventually(renewed_so_far, lambda count: count >= 20, within=60)
            async with first.transaction() as txn:
                await txn.send(output, b"first", partition=0)
            await first.resign()

            second = await asyncio.wait_for(
                acquire_leadership(b, role, "b", partitions=4, **TIMING), 30)
            async with second.transaction() as txn:
                await txn.send(output, b"second", partition=0)
            status = await describe_leadership(observer, role)
            assert status.authoritative(second.token)
            assert not status.authoritative(first.token)
            assert second.tenure > first.tenure
            await second.resign()
        assert await committed_values(kafka_bootstrap, output) == [b"first", b"second"]

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(scenario())

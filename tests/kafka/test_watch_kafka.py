"""A watcher (`watch_roles`) on the real broker: it sees a real candidate's
elections and resignations, in order, and writes nothing to the state topic."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from krabka import RoleChange, acquire_leadership, describe_roles, watch_roles
from krabka.format.partition import role_partition
from krabka.kafka import KafkaTransport

pytestmark = pytest.mark.integration

PARTITIONS = 4
WITHIN = 30  # seconds for a committed record to reach the watcher


@pytest.fixture
async def state_topic(kafka_bootstrap):
    topic = f"state-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(topic, PARTITIONS, 1, topic_configs={"cleanup.policy": "compact"})])
    finally:
        await admin.close()
    return topic


async def _lead(transport: KafkaTransport, role: str, member: str):
    return await acquire_leadership(transport, role, member, partitions=PARTITIONS,
                                    lease_duration=10, renew_interval=2, challenge_stagger=1)


async def test_a_watcher_sees_a_real_candidates_elections_and_resignations_in_order(
        kafka_bootstrap, state_topic):
    role = f"test.watch-{uuid.uuid4().hex[:8]}"
    async with KafkaTransport(kafka_bootstrap, topic=state_topic) as candidates, \
            KafkaTransport(kafka_bootstrap, topic=state_topic) as reader:
        before = await _lead(candidates, role, "early")  # before the watch: not reported
        await before.resign()
        changes: list[RoleChange] = []
        async with watch_roles(reader, PARTITIONS, roles=[role]) as watch:
            start = watch.positions[role_partition(role, PARTITIONS)]

            async def collect(count: int) -> None:
                while len([c for c in changes if c.event]) < count:
                    changes.append(await anext(watch))

            first = await _lead(candidates, role, "worker-1")
            await first.resign()
            second = await _lead(candidates, role, "worker-2")
            await second.resign(deregister=False)
            await asyncio.wait_for(collect(7), WITHIN)
        events = [(c.event.kind, c.event.member) for c in changes if c.event]
        assert events == [
            ("member-joined", "worker-1"), ("elected", "worker-1"),
            ("resigned", "worker-1"), ("member-left", "worker-1"),
            ("member-joined", "worker-2"), ("elected", "worker-2"),
            ("resigned", "worker-2"),
        ]
        offsets = [c.offset for c in changes]
        assert offsets == sorted(offsets)
        assert offsets[0] >= start
        elected = [c for c in changes if c.event and c.event.kind == "elected"]
        assert [(c.event.token, c.event.tenure) for c in elected] == [
            (first.token, first.tenure), (second.token, second.tenure)]
        assert elected[1].state.holder == "worker-2"
        # The watcher is nobody's member: the log's rosters name only candidates.
        for state in await describe_roles(reader, PARTITIONS):
            assert set(state.roster) <= {"early", "worker-1", "worker-2"}
        assert all(set(c.state.roster) <= {"worker-1", "worker-2"} for c in changes)

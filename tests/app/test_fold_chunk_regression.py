"""The chunked fold tells the story the per-record fold tells.

A recorded state topic of 100 000 records, as a cluster writes it (roles
renewed in round-robin, each write its own transaction, with fences, resigns,
lapses, members joining and leaving, malformed values, undecodable keys and
misplaced records: tests/support/renewal_stream.py), is folded by the fold
agent's step (`apply_batch`) in chunks of every size up to the agent's
largest, and record by record by the reference fold (`agents.fold.rules.fold`,
`fold_unattributed`). Every event, in order, and every table value the agent
writes must be the reference's.
"""

from __future__ import annotations

import random

import faust.streams
import orjson

import agents.fold.agent
from agents.fold import partition_value, role_value
from agents.fold.agent import FOLD_BATCH, apply_batch
from agents.fold.partition_value import PartitionValue, partition_key
from agents.fold.role_value import RoleValue
from agents.fold.rules import Unattributed, fold, fold_unattributed, route
from tests.app.test_app_tick import make_ctx
from tests.support.event_schema import Published
from tests.support.faust_events import state_event
from tests.support.renewal_stream import RecordedTopic, record_topic

RECORDS = 100_000


class Written(dict):
    """A table that remembers the keys written since it was last asked, and checks
    each write lands in the partition of Faust's current event."""

    def __init__(self) -> None:
        super().__init__()
        self.since: set[bytes] = set()
        self.partitions: dict[bytes, int] = {}

    def __setitem__(self, key: bytes, value: bytes) -> None:
        event = faust.streams.current_event()
        assert event is not None, "a table write outside any event"
        self.partitions[key] = event.message.partition
        self.since.add(key)
        super().__setitem__(key, value)

    def written(self) -> set[bytes]:
        since, self.since = self.since, set()
        return since


class Reference:
    """The per-record fold of the same records, one record at a time."""

    def __init__(self, partitions: int, options) -> None:
        self.partitions = partitions
        self.options = options
        self.roles: dict[bytes, RoleValue] = {}
        self.counted: dict[int, PartitionValue] = {}
        self.events: list[bytes] = []

    def fold(self, partition: int, record) -> None:
        key = route(record, partition, self.partitions)
        if isinstance(key, Unattributed):
            current = self.counted.get(partition)
            if current is None or record.offset > current.last_offset:
                self.counted[partition] = fold_unattributed(current, record, partition, key)
            return
        role_key = key.role.encode()
        value, events = fold(self.roles.get(role_key), record, partition, self.partitions,
                             placement=self.options.placement,
                             challenge_stagger=self.options.challenge_stagger)
        assert value is not None
        self.roles[role_key] = value
        self.events.extend(event.encode() for event in events)


def chunks(topic: RecordedTopic, seed: int) -> list[list]:
    """The topic's records as events, cut into chunks of random sizes up to FOLD_BATCH."""
    rng = random.Random(seed)
    events = [state_event(record, partition) for partition, record in topic.records]
    cut, at = [], 0
    while at < len(events):
        size = rng.choice((1, 2, rng.randrange(1, 64), rng.randrange(1, FOLD_BATCH + 1),
                           FOLD_BATCH))
        cut.append(events[at:at + size])
        at += size
    return cut


async def test_the_chunked_fold_writes_every_value_and_event_the_per_record_fold_makes():
    topic = record_topic(RECORDS, roles=1_000, partitions=4)
    assert topic.partitions == 4  # make_ctx's
    ctx = make_ctx()
    ctx.tables.role_state, ctx.tables.partition_state = Written(), Written()
    ctx.events_topic = Published()
    reference = Reference(topic.partitions, ctx.settings.leadership_options)
    kinds: set[str] = set()
    for chunk in chunks(topic, seed=2):
        await apply_batch(ctx, chunk)
        for event in chunk:
            message = event.message
            reference.fold(message.partition, agents.fold.agent._record(message))
        for key in ctx.tables.role_state.written():
            expected = reference.roles[key]
            assert ctx.tables.role_state[key] == role_value.encode(expected), key
            assert ctx.tables.role_state.partitions[key] == expected.partition
        for key in ctx.tables.partition_state.written():
            partition = int(key)
            assert key == partition_key(partition)
            assert ctx.tables.partition_state[key] == partition_value.encode(
                reference.counted[partition])
    assert ctx.events_topic.values == reference.events
    assert ctx.tables.role_state.keys() == reference.roles.keys()
    assert ctx.tables.partition_state.keys() == {partition_key(p) for p in reference.counted}
    for value in ctx.events_topic.values:
        kinds.add(orjson.loads(value)["kind"])
    # The story has every kind of change in it, and the records the fold skips.
    assert kinds >= {"member-joined", "member-left", "elected", "resigned", "lapsed"}
    assert any(value.state.skipped for value in reference.roles.values())
    assert any(value.undecodable and value.misplaced for value in reference.counted.values())
    assert any(value.state.tenures and len(value.state.tenures) > 2
               for value in reference.roles.values())

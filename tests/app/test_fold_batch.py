"""The fold agent's batch: records folded in order, each role's value written
once per batch, as the event of the role's partition (Faust puts a table write
in the store and changelog partition of the current event)."""

from __future__ import annotations

import faust.streams
import pytest

import agents.fold
from agents.fold import apply_batch
from agents.folding import fold
from tables import role_state
from tests.app.test_app_tick import PARTITIONS, leased, make_ctx, roles_by_partition
from tests.support.faust_events import state_event

NOW = 1_700_000_000_000


class Written(dict):
    """A table that records, at each write, the partition of Faust's current event."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[bytes, int]] = []

    def __setitem__(self, key: bytes, value: bytes) -> None:
        event = faust.streams.current_event()
        assert event is not None, "a table write outside any event: Faust would refuse it"
        self.writes.append((key, event.message.partition))
        super().__setitem__(key, value)


class Published:
    def __init__(self) -> None:
        self.values: list[bytes] = []

    async def send(self, *, key: bytes, value: bytes, partition: int) -> None:
        self.values.append(value)


def interleaved(histories: dict[str, tuple[int, list]]) -> list:
    """The roles' records as events, alternating between the roles, each role's in order."""
    queues = {role: list(records) for role, (_, records) in histories.items()}
    batch = []
    while any(queues.values()):
        for role, queue in queues.items():
            if queue:
                batch.append(state_event(queue.pop(0), histories[role][0]))
    return batch


def one_by_one(histories: dict[str, tuple[int, list]]) -> dict[str, object]:
    values = {}
    for role, (partition, records) in histories.items():
        value = None
        for record in records:
            value, _ = fold(value, record, partition, PARTITIONS)
        values[role] = value
    return values


@pytest.fixture
def ctx():
    ctx = make_ctx()
    ctx.tables.role_state = Written()
    ctx.events_topic = Published()
    return ctx


def histories_in_two_partitions() -> dict[str, tuple[int, list]]:
    by_partition = roles_by_partition(2)
    return {role: (partition, leased(role, NOW + 10_000, NOW + 20_000, NOW + 30_000))
            for partition in (1, 3) for role in by_partition[partition]}


async def test_a_batch_writes_each_role_once_in_its_own_partition(ctx):
    histories = histories_in_two_partitions()
    await apply_batch(ctx, interleaved(histories))
    table = ctx.tables.role_state
    assert sorted(table.writes) == sorted((role.encode(), partition)
                                          for role, (partition, _) in histories.items())
    expected = one_by_one(histories)
    assert {key.decode(): role_state.decode(raw) for key, raw in table.items()} == expected


async def test_a_batch_continues_from_the_values_earlier_batches_wrote(ctx):
    histories = histories_in_two_partitions()
    batch = interleaved(histories)
    for start in range(0, len(batch), 3):
        await apply_batch(ctx, batch[start:start + 3])
    table = ctx.tables.role_state
    assert {key.decode(): role_state.decode(raw) for key, raw in table.items()} == \
        one_by_one(histories)


async def test_a_batch_publishes_each_record_s_events_in_the_batch_s_order(ctx):
    histories = histories_in_two_partitions()
    batch = interleaved(histories)
    await apply_batch(ctx, batch)
    expected, values = [], {}
    for event in batch:
        message = event.message
        record = agents.fold._record(message)
        role = next(r for r, (_, records) in histories.items() if record in records)
        values[role], changes = fold(values.get(role), record, message.partition, PARTITIONS)
        expected.extend(changes)
    assert expected
    assert ctx.events_topic.values == [e.encode() for e in expected]


async def test_a_record_the_fold_fails_on_costs_only_that_record(ctx, monkeypatch, caplog):
    histories = histories_in_two_partitions()
    batch = interleaved(histories)
    broken = batch[1].message.offset, batch[1].message.partition
    real_fold = agents.fold.fold

    def failing_fold(value, record, partition, partitions, **kwargs):
        if (record.offset, partition) == broken:
            raise RuntimeError("a bug in the fold")
        return real_fold(value, record, partition, partitions, **kwargs)

    monkeypatch.setattr(agents.fold, "fold", failing_fold)
    await apply_batch(ctx, batch)
    assert "fold failed at partition" in caplog.text
    # Every role is written; only the broken record's role misses that record.
    assert len(ctx.tables.role_state.writes) == len(histories)

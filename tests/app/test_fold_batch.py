"""The fold agent's batch: records folded in order, each role's value written
once per batch, as the event of the role's partition (Faust puts a table write
in the store and changelog partition of the current event)."""

from __future__ import annotations

import asyncio
import dataclasses
import functools

import faust.streams
import orjson
import pytest
from aiokafka.errors import KafkaTimeoutError, RequestTimedOutError
from faust.exceptions import ProducerSendError

import agents.fold.agent
import agents.fold.chunk
from agents.fold import role_value
from agents.fold.agent import FOLD_RETRY_MS, apply_batch, until_applied
from agents.fold.rules import fold
from krabka.rules.state import Record
from tests.app.test_app_tick import PARTITIONS, leased, make_ctx, roles_by_partition
from tests.support.event_schema import Published
from tests.support.faust_events import state_event
from tests.support.loop import run_ready_callbacks

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
    assert {key.decode(): role_value.decode(raw) for key, raw in table.items()} == expected


async def test_a_batch_continues_from_the_values_earlier_batches_wrote(ctx):
    histories = histories_in_two_partitions()
    batch = interleaved(histories)
    for start in range(0, len(batch), 3):
        await apply_batch(ctx, batch[start:start + 3])
    table = ctx.tables.role_state
    assert {key.decode(): role_value.decode(raw) for key, raw in table.items()} == \
        one_by_one(histories)


async def test_a_batch_publishes_each_record_s_events_in_the_batch_s_order(ctx):
    histories = histories_in_two_partitions()
    batch = interleaved(histories)
    await apply_batch(ctx, batch)
    expected, values = [], {}
    for event in batch:
        message = event.message
        record = agents.fold.agent._record(message)
        role = next(r for r, (_, records) in histories.items() if record in records)
        values[role], changes = fold(values.get(role), record, message.partition, PARTITIONS)
        expected.extend(changes)
    assert expected
    assert ctx.events_topic.values == [e.encode() for e in expected]


async def test_a_record_the_fold_fails_on_costs_only_that_record(ctx, monkeypatch, caplog):
    """The chunk changes a role's value in place: a record whose fold raised half
    way leaves its role's value as the role's other records make it."""
    histories = histories_in_two_partitions()
    batch = interleaved(histories)
    broken = batch[len(histories) + 1].message  # a role's second record, more to follow
    real_step = agents.fold.chunk.step

    def failing_step(value, folder, key, record):
        if (record.offset, value.partition) == (broken.offset, broken.partition):
            value.last_offset = record.offset
            value.state.skipped += 100
            value.state.entries.clear()
            raise RuntimeError("a bug in the fold")
        return real_step(value, folder, key, record)

    monkeypatch.setattr(agents.fold.chunk, "step", failing_step)
    await apply_batch(ctx, batch)
    assert "fold failed at partition" in caplog.text
    expected = one_by_one({
        role: (partition, [r for r in records
                           if (r.offset, partition) != (broken.offset, broken.partition)])
        for role, (partition, records) in histories.items()})
    table = ctx.tables.role_state
    assert len(table.writes) == len(histories)
    assert {key.decode(): role_value.decode(raw) for key, raw in table.items()} == expected


class FailingOnce(Published):
    """An events topic whose first send of an `kind` event fails with `error`."""

    def __init__(self, kind: str, error: Exception) -> None:
        super().__init__()
        self.kind = kind
        self.error: Exception | None = error

    async def send(self, *, key: bytes, value: bytes, partition: int) -> None:
        if self.error is not None and orjson.loads(value)["kind"] == self.kind:
            error, self.error = self.error, None
            raise error
        await super().send(key=key, value=value, partition=partition)


async def applied(ctx, batch) -> None:
    """Fold `batch` as the agent does (`until_applied`), moving the clock past each wait."""
    apply = functools.partial(apply_batch, ctx, batch)
    task = asyncio.ensure_future(until_applied(ctx, apply, batch, "the batch"))
    for _ in range(10):
        await run_ready_callbacks()
        if task.done():
            return task.result()
        assert ctx.clock.next_wake_ms is not None, "neither done nor waiting to fold again"
        ctx.clock.advance_ms(FOLD_RETRY_MS)
    task.cancel()
    raise AssertionError("still folding after 10 attempts")


def story(values: list[bytes]) -> list[tuple[str, str, int, int | None]]:
    events = [orjson.loads(value) for value in values]
    return [(e["role"], e["kind"], e["offset"], e["tenure"]) for e in events]


@pytest.mark.parametrize("error", [
    ProducerSendError("Error while sending: KafkaTimeoutError()"),  # Faust's send
    RequestTimedOutError(),  # the acknowledgement
], ids=["send", "acknowledgement"])
async def test_an_event_send_that_fails_once_folds_the_batch_again_and_tells_the_same_story(
    error,
):
    """A record whose events could not be sent was skipped as if malformed: the
    role's next renewal was then folded as a new tenure, elected at its offset."""
    histories = histories_in_two_partitions()
    batch = interleaved(histories)
    expected = make_ctx()
    expected.tables.role_state, expected.events_topic = Written(), Published()
    await applied(expected, batch)

    ctx = make_ctx()
    ctx.tables.role_state, ctx.events_topic = Written(), FailingOnce("elected", error)
    await applied(ctx, batch)

    assert ctx.events_topic.error is None  # it did fail once
    assert story(ctx.events_topic.values) == story(expected.events_topic.values)
    assert dict(ctx.tables.role_state) == dict(expected.tables.role_state)
    for role, (_, records) in histories.items():
        first_lease = records[1].offset
        assert [(kind, offset, tenure) for r, kind, offset, tenure
                in story(ctx.events_topic.values)
                if r == role and kind == "elected"] == [("elected", first_lease, first_lease)]


async def test_an_error_that_is_not_a_failed_store_is_raised_at_once():
    ctx = make_ctx()
    attempts = []

    async def buggy() -> None:
        attempts.append(1)
        raise AttributeError("a bug")

    with pytest.raises(AttributeError):
        await until_applied(ctx, buggy, [], "the batch")
    assert attempts == [1]


async def test_the_agent_keeps_folding_again_while_the_events_cannot_be_stored():
    ctx = make_ctx()
    attempts = []

    async def unreachable() -> None:
        attempts.append(ctx.clock.monotonic_ms())
        raise KafkaTimeoutError()

    batch = interleaved(histories_in_two_partitions())
    task = asyncio.ensure_future(until_applied(ctx, unreachable, batch, "the batch"))
    try:
        for _ in range(3):
            await run_ready_callbacks()
            ctx.clock.advance_ms(FOLD_RETRY_MS)
        await run_ready_callbacks()
        assert not task.done()
        assert [at - attempts[0] for at in attempts] == [0, FOLD_RETRY_MS, 2 * FOLD_RETRY_MS,
                                                        3 * FOLD_RETRY_MS]
    finally:
        task.cancel()
        await asyncio.wait({task})


async def test_events_fetched_before_a_rebalance_are_given_up_after_a_failed_store(caplog):
    """Their partitions may have gone to another worker (with the producers their
    events would be sent through); the owners read them from the committed offsets."""
    ctx = make_ctx()
    attempts = []

    async def unreachable() -> None:
        attempts.append(1)
        raise KafkaTimeoutError()

    batch = interleaved(histories_in_two_partitions())
    task = asyncio.ensure_future(until_applied(ctx, unreachable, batch, "the batch"))
    try:
        await run_ready_callbacks()
        ctx.app.consumer_generation_id += 1  # a rebalance while the fold waits
        ctx.clock.advance_ms(FOLD_RETRY_MS)
        await run_ready_callbacks()
        assert task.done()
        assert task.result() is None
    finally:
        task.cancel()
    assert attempts == [1]
    assert "given up: a rebalance came since it was fetched" in caplog.text


async def test_a_record_no_role_owns_is_counted_once_when_its_batch_is_folded_again():
    (partition, roles), *_ = roles_by_partition(1).items()
    unowned = Record(0, b"\xff not a key", b"", NOW)
    records = [unowned, *(dataclasses.replace(record, offset=record.offset + 1)
                          for record in leased(roles[0], NOW + 10_000, NOW + 20_000))]
    ctx = make_ctx()
    ctx.tables.role_state = Written()
    ctx.events_topic = FailingOnce("elected", KafkaTimeoutError())
    await applied(ctx, [state_event(record, partition) for record in records])
    assert ctx.events_topic.error is None  # the batch was folded twice
    skipped = ctx.metrics.registry.get_sample_value(
        "coordination_skipped_records_total",
        {"partition": str(partition), "reason": "undecodable-key"})
    assert skipped == 1


async def test_a_chunk_whose_publishing_stops_half_way_writes_the_values_of_what_it_published():
    """Faust acknowledges a chunk's events even when the agent stops with them (a
    cancellation at shutdown): the values written are those of the records whose
    events were all published, never a value ahead of its events."""
    histories = histories_in_two_partitions()
    batch = interleaved(histories)
    ctx = make_ctx()
    ctx.tables.role_state = Written()
    ctx.events_topic = FailingOnce("elected", KafkaTimeoutError())
    with pytest.raises(KafkaTimeoutError):
        await apply_batch(ctx, batch)
    stopped = next(i for i, event in enumerate(batch)
                   if agents.fold.agent._record(event.message) in
                   [r for _, records in histories.values() for r in records[1:2]])
    published = {}
    for event in batch[:stopped]:
        message = event.message
        record = agents.fold.agent._record(message)
        role = next(r for r, (_, records) in histories.items() if record in records)
        published.setdefault(role, (message.partition, []))[1].append(record)
    assert published  # the records before the first lease: the registrations
    table = ctx.tables.role_state
    assert {key.decode(): role_value.decode(raw) for key, raw in table.items()} == \
        one_by_one(published)
    assert story(ctx.events_topic.values) == [
        (role, "member-joined", records[0].offset, None)
        for role, (_, records) in published.items()]

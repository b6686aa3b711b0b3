"""The fold agent: ``__coordination_state`` -> ``role_state`` + leadership-change events.

Consumes the state topic as raw bytes (read_committed under exactly_once, so
aborted lease writes never reach the table), folds each record into its
role's table value with the pure `agents.fold.rules.fold`, and publishes the
events it causes, keyed by role, to the same partition of the events topic,
and to the worker's live feed (`app.web.feed`, which ``GET /events/`` streams).
Table writes, events and the consumed offset commit in one Kafka transaction.

The tick agent reports lapses nobody wrote a record about: a timer sends a
tick to each state partition this worker owns that has a value due (on a
co-partitioned ticks topic), and the tick, processed inside that partition's
transaction, may write the table and emit ``lapsed``.

In term mode (``COORDINATION_FENCING=term``) a third agent folds
``__coordination_terms`` (co-partitioned: a role's terms records are in the
partition of the same number, so they land in the same table value), and the
tick reports a holder's silence too. Faust runs at_least_once there (no
transactions): a record's events are published, and acknowledged, before its
table value is written, so a crash between the two repeats events on the
replay rather than losing them, and the value's last applied offset makes
the replay change nothing else. Three agents then read, update and write one
role's value with an await in between (the acknowledgement), so each does it
under the worker's fold lock: without it one agent's write would undo
another's.

Nothing a record contains can stop any agent: a malformed record is
counted and reported (in the role's value, or the partition's), then
skipped, and so is a record the pure fold fails on (a bug, logged). A
failure to store what a record caused is not skipped: an event send, its
acknowledgement or a table write that fails propagates out of the fold, and
the agent folds the same events again after `FOLD_RETRY_MS` (`until_applied`).
Faust acks the events an agent holds only once the agent has finished with
them, so their offsets stay uncommitted meanwhile, and the value's last
applied offset makes the part already stored a replay that changes nothing.
Catching such a failure as a bad record would lose the record's events and
value together, while the next records folded on: a renewal would then
open a new tenure, at the wrong offset.
"""

from __future__ import annotations

import functools
import logging
import weakref
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import orjson
from aiokafka.errors import KafkaError
from faust.exceptions import ProducerSendError
from faust.streams import _current_event
from faust.types import EventT

from agents.context import AgentContext
from agents.events import LeadershipEvent
from agents.fold import partition_value, role_value
from agents.fold.chunk import Chunk, fold_chunk
from agents.fold.partition_value import PartitionValue, partition_key
from agents.fold.role_value import RoleValue
from agents.fold.rules import (
    Unattributed,
    due_at,
    expire,
    expire_term,
    fold_terms,
    route_term,
)
from krabka.format.partition import role_partition
from krabka.rules.state import OutOfOrder, Record

__all__ = ["FOLD_BATCH", "FOLD_RETRY_MS", "FOLD_WITHIN", "STORE_ERRORS", "apply_batch",
           "apply_terms_record", "apply_tick", "as_current_event", "install", "ticked",
           "until_applied"]

log = logging.getLogger("agents.fold.agent")


FOLD_BATCH = 1000
"""The most state-topic records the fold agent takes at once."""
FOLD_WITHIN = 0.01
"""Seconds the fold agent waits for a batch to fill: the longest a record waits
to be folded (the commit interval, 0.2 s by default, decides when it is seen)."""
FOLD_RETRY_MS = 1000
"""Milliseconds an agent waits before it folds again what it could not store."""
STORE_ERRORS: tuple[type[Exception], ...] = (KafkaError, ProducerSendError)
"""What a failed event send, acknowledgement or table write raises: aiokafka's
errors, and Faust's wrapping of them in its producer's ``send``."""


@contextmanager
def as_current_event(event: EventT) -> Iterator[None]:
    """Make `event` Faust's current event while the block runs.

    A table write goes to the store and changelog partition of the current
    event, and Faust sets that only for the event a stream is yielding: in a
    batch from ``Stream.take_events`` it is none of the batch's events (a
    background task gathers them). Faust has no public way to say which event
    a write belongs to, so this sets the context variable Faust's own stream
    iterator sets (listed in `app.faust_internals`), and restores it after.
    """
    token = _current_event.set(weakref.ref(event))
    try:
        yield
    finally:
        _current_event.reset(token)


def _record(message: Any) -> Record:
    # Faust gives the Kafka timestamp in float seconds; the format uses ms.
    timestamp = round(message.timestamp * 1000) if message.timestamp else 0
    return Record(message.offset, message.key or b"", message.value, timestamp)


def _load(ctx: AgentContext, key: bytes) -> RoleValue | None:
    raw = ctx.tables.role_state.get(key)
    if raw is None:
        return None
    try:
        return role_value.decode(raw)
    except ValueError as exc:
        # Only this module writes the table; a value it cannot read is a bug
        # or a foreign writer. Start the role afresh rather than stop the fold.
        log.error("role_state[%r] is unreadable, folding it afresh: %s", key, exc)
        return None


async def _publish(ctx: AgentContext, events: list[LeadershipEvent]) -> None:
    """Send `events`; without transactions (term mode), wait until each is written.

    Under exactly_once the events commit with the table value in the
    partition's transaction. At least once, a value written before its
    events are would, after a crash, make the replay skip them for good.
    """
    for event in events:
        sent = await ctx.events_topic.send(key=event.role.encode("utf-8"), value=event.encode(),
                                           partition=event.partition)
        if ctx.settings.term_mode:
            await sent
        ctx.metrics.event(event.kind)
        ctx.feed.publish(event)


def _write(ctx: AgentContext, partition: int, key: bytes, value: RoleValue) -> None:
    """Write a role's value, and note when it is next due for the tick."""
    ctx.tables.role_state[key] = role_value.encode(value)
    ctx.due.note(partition, key, due_at(value, ctx.settings.leadership_options.lease_ms))


async def apply_batch(ctx: AgentContext, events: Sequence[EventT]) -> None:
    """Fold a chunk of state-topic events in one pass; write each role's value once.

    `agents.fold.chunk.fold_chunk` folds the chunk's records without storing
    anything; then each record's events are published in the chunk's order,
    and each role's value is written once, after them, as its last record's
    event (so the write lands in the role's partition of the table and the
    changelog): a role's twenty records cost one table write, one changelog
    record and one encode, not twenty. The fold lock is held for the whole
    chunk, so the tick never reads a value the chunk has not written yet.

    If publishing stops half way (a failed send, a cancellation), the values
    written are those of the records whose events were all published,
    folded again from the same table values: a role's value is never stored
    ahead of its events, and what was folded is written even if the chunk
    stops half way (Faust acknowledges a chunk's events even then).
    """
    records = [(event.message.partition, _record(event.message)) for event in events]
    async with ctx.fold_lock:
        chunk = _fold_chunk(ctx, records)
        published = 0
        try:
            for index, record_events in chunk.events:
                published = index
                await _publish(ctx, record_events)
            published = len(records)
        finally:
            if published < len(records):
                chunk = _fold_chunk(ctx, records[:published])
            _store(ctx, events, chunk)
            _report(ctx, chunk)


def _fold_chunk(ctx: AgentContext, records: Sequence[tuple[int, Record]]) -> Chunk:
    partitions = ctx.tables.partition_state

    def load_partition(partition: int) -> PartitionValue | None:
        raw = partitions.get(partition_key(partition))
        return None if raw is None else partition_value.decode(raw)

    options = ctx.settings.leadership_options
    return fold_chunk(records, functools.partial(_load, ctx), load_partition, ctx.partitions,
                      placement=options.placement, challenge_stagger=options.challenge_stagger)


def _store(ctx: AgentContext, events: Sequence[EventT], chunk: Chunk) -> None:
    """Write the chunk's values, each as the event of its last record (its partition)."""
    for partition, (value, index) in chunk.partitions.items():
        with as_current_event(events[index]):
            ctx.tables.partition_state[partition_key(partition)] = partition_value.encode(value)
    for role_key, (role, index) in chunk.values.items():
        with as_current_event(events[index]):
            _write(ctx, role.partition, role_key, role)


def _report(ctx: AgentContext, chunk: Chunk) -> None:
    """Log and count what the chunk skipped, and what its fold failed on."""
    for failure in chunk.failures:
        # A bug of the fold must not wedge the partition: log it loudly and go on.
        log.error("fold failed at partition %d offset %d", failure.partition, failure.offset,
                  exc_info=failure.error)
    for skip in chunk.skips:
        ctx.metrics.skip(skip.partition, skip.kind)
        if skip.role is None:
            log.warning("partition %d offset %d skipped: %s", skip.partition, skip.offset,
                        skip.reason)
        else:
            log.warning("%s: partition %d offset %d skipped: %s", skip.role, skip.partition,
                        skip.offset, skip.reason)
    for role, seen in chunk.out_of_order:
        _warn_out_of_order(role, seen)


async def apply_terms_record(ctx: AgentContext, message: Any) -> None:
    """Fold one ``__coordination_terms`` message (what the terms agent does per event)."""
    partition = message.partition
    record = _record(message)
    timeout_ms = ctx.settings.leadership_options.lease_ms
    key = route_term(record, partition, ctx.partitions)
    if isinstance(key, Unattributed):
        # Counted, not kept: the partition's value counts state-topic offsets.
        ctx.metrics.skip(partition, f"term-{key.kind}")
        log.warning("terms partition %d offset %d skipped: %s", partition, record.offset,
                    key.reason)
        return
    role, role_key = key.role, key.role.encode("utf-8")
    async with ctx.fold_lock:
        try:
            current = _load(ctx, role_key)
            value, events = fold_terms(current, record, partition, ctx.partitions, timeout_ms)
        except Exception:
            # A bug of the fold must not wedge the partition: log it loudly and go on.
            log.exception("the terms fold failed at partition %d offset %d", partition,
                          record.offset)
            return
        if value is None or value is current:
            return
        await _publish(ctx, events)
        _write(ctx, partition, role_key, value)
    assert value.terms is not None
    before = 0 if current is None or current.terms is None else len(current.terms.errors)
    if len(value.terms.errors) > before:
        ctx.metrics.skip(partition, "malformed-term")
        log.warning("%s: terms partition %d offset %d skipped: %s", role, partition,
                    record.offset, value.terms.errors[-1][1])


def _warn_out_of_order(role: str, seen: OutOfOrder) -> None:
    log.warning("%s: %s took the role at %d, before its slot at %d under this worker's "
                "placement %r (offset %d): the role's members mix placement policies (or "
                "challenge staggers); give every member of a role the same ones",
                role, seen.member, seen.granted_at, seen.slot, seen.placement, seen.offset)


@functools.lru_cache(maxsize=1 << 16)
def _home(key: bytes, partitions: int) -> int:
    """The state partition of the role whose table key is `key`."""
    return role_partition(key.decode("utf-8"), partitions)


async def apply_tick(ctx: AgentContext, partition: int, now_ms: int) -> None:
    """Report every lapse on `partition` due at `now_ms` (what the tick agent does).

    Only the values due are decoded (`agents.fold.due`). The table holds the
    values of every partition this worker owns, and each owned partition gets
    its own tick, so decoding them all at each tick cost a pass over every
    role per partition per tick interval; the index is built from the
    partition's values at its first tick after a rebalance. The fold routes a
    record only to the role of its own partition (`route`), so a value's
    partition is its key's.
    """
    table = ctx.tables.role_state
    timeout_ms = ctx.settings.leadership_options.lease_ms
    async with ctx.fold_lock:
        decoded = {} if ctx.due.built(partition) else _build_due(ctx, partition, now_ms)
        for key in ctx.due.due(partition, now_ms):
            value = decoded.get(key)
            if value is None:
                raw = table.get(key)
                if raw is None:
                    ctx.due.note(partition, key, None)
                    continue
                value = role_value.decode(raw)
            new, events = expire(value, now_ms)
            if new.terms is not None:
                new, term = expire_term(new, now_ms, timeout_ms)
                events += term
            if events:
                await _publish(ctx, events)
                table[key] = role_value.encode(new)
            # Checked at or after its due time: nothing more until the value changes.
            due = due_at(new, timeout_ms)
            ctx.due.note(partition, key, due if due is not None and due > now_ms else None)


def _build_due(ctx: AgentContext, partition: int, now_ms: int) -> dict[bytes, RoleValue]:
    """Build `partition`'s due index from the table; return the values due at `now_ms`."""
    timeout_ms = ctx.settings.leadership_options.lease_ms
    entries: list[tuple[bytes, int | None]] = []
    due_now: dict[bytes, RoleValue] = {}
    for key, raw in list(ctx.tables.role_state.items()):
        if _home(key, ctx.partitions) != partition:
            continue
        value = role_value.decode(raw)
        due = due_at(value, timeout_ms)
        entries.append((key, due))
        if due is not None and due <= now_ms:
            due_now[key] = value
    ctx.due.build(partition, entries)
    return due_now


def install(ctx: AgentContext) -> None:
    """Declare the fold and tick agents and the tick timer on `ctx.app`."""
    app = ctx.app

    async def forget_due(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        ctx.due.forget()

    # Faust restores values into the table and takes partitions away without
    # the agents: the tick's index is built again from the table afterwards.
    for rebalanced in (app.on_partitions_revoked, app.on_partitions_assigned,
                       app.on_rebalance_complete):
        rebalanced.connect(forget_due)

    @app.agent(ctx.state_topic, name="coordination-fold")
    async def fold_agent(stream: Any) -> None:
        async for events in stream.take_events(FOLD_BATCH, FOLD_WITHIN):
            await until_applied(ctx, functools.partial(apply_batch, ctx, events), events,
                                _batch_place(events))

    if ctx.terms_topic is not None:

        @app.agent(ctx.terms_topic, name="coordination-fold-terms")
        async def terms_agent(stream: Any) -> None:
            async for event in stream.events():
                message = event.message
                await until_applied(ctx, functools.partial(apply_terms_record, ctx, message),
                                    [event], f"terms partition {message.partition} offset "
                                    f"{message.offset}")

    @app.agent(ctx.ticks_topic, name="coordination-ticks")
    async def tick_agent(stream: Any) -> None:
        async for event in stream.events():
            try:
                tick = orjson.loads(event.message.value)
                await apply_tick(ctx, event.message.partition, int(tick["now"]))
            except Exception:
                # Nothing is lost with a tick: one that could not store its
                # events wrote no value, so the next tick reports the lapse again.
                log.exception("tick failed at partition %d", event.message.partition)

    @app.timer(ctx.settings.tick_interval, name="coordination-tick-timer")
    async def send_ticks() -> None:
        # The plain (non-transactional) producer: a tick is only a wake-up,
        # and it must become readable without waiting for a commit.
        topic = ctx.ticks_topic.get_topic_name()
        now_ms = ctx.clock.now_ms()
        owned = sorted(tp.partition for tp in app.assignor.assigned_actives()
                       if tp.topic == topic)
        payload = orjson.dumps({"now": now_ms})
        for partition in ticked(ctx, owned, now_ms):
            await app.producer.send(topic, None, payload, partition, None, None)


async def until_applied(ctx: AgentContext, apply: Callable[[], Awaitable[None]],
                        events: Sequence[EventT], place: str) -> None:
    """Run `apply` (`apply_batch` or `apply_terms_record` on `events`, the events
    an agent holds) until it has stored what it folds.

    A `STORE_ERRORS` failure is logged and the same events are folded again
    `FOLD_RETRY_MS` later, for as long as the agent runs: Faust acks them only
    after this returns, so their offsets are not committed before their events
    and values are stored. The attempt that failed stored a prefix of the
    records' events and values in order (a role's value only after its
    events), so the next one finds the stored part a replay; an event whose
    send failed after the broker took it is repeated, at the same role, kind
    and offset. Any other error is a bug and propagates.

    Once a rebalance has come since the events were fetched, they are given
    up: Faust skips the events of an earlier consumer generation itself (their
    partitions' producers may be gone), and their partitions' owners now read
    them from the committed offsets, which never passed them.
    """
    while True:
        try:
            await apply()
            return
        except STORE_ERRORS as exc:
            log.error("folding %s: storing its events or values failed (%r); folding it "
                      "again in %d ms", place, exc, FOLD_RETRY_MS)
        await ctx.clock.sleep_until_monotonic(ctx.clock.monotonic_ms() + FOLD_RETRY_MS)
        generation = ctx.app.consumer_generation_id
        if any(event.message.generation_id != generation for event in events):
            log.warning("folding %s given up: a rebalance came since it was fetched, and "
                        "its partitions' owners fold it from their committed offsets", place)
            return


def _batch_place(events: Sequence[EventT]) -> str:
    first, last = events[0].message, events[-1].message
    return (f"a batch of {len(events)} records (partition {first.partition} offset "
            f"{first.offset} to partition {last.partition} offset {last.offset})")


def ticked(ctx: AgentContext, owned: Sequence[int], now_ms: int) -> list[int]:
    """The partitions of `owned` the tick timer sends a tick at `now_ms`: those whose
    tick would find something to do (`agents.fold.due.DueIndex.wants_tick`)."""
    return [partition for partition in owned if ctx.due.wants_tick(partition, now_ms)]

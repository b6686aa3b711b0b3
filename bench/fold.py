"""fold-throughput: state records folded per second vs a raw consume-and-decode loop.

A 16-partition copy of the state topic is filled with registrations, leases
and renewals of many roles, once per workload (`WORKLOADS`: each role's
records back to back, or the roles interleaved with every record its own
transaction). Each trial reads it all from the start with one
read_committed aiokafka consumer:

- ``aiokafka-raw`` (the ceiling for our stack): decode each record's key and
  value with the library's decoders, nothing else;
- ``krabka``: the worker application's own step, ``agents.fold.agent.apply_batch``
  (route, fold, the table value codec, events) over batches of
  ``agents.fold.agent.FOLD_BATCH`` records, with in-memory dicts for the tables and
  a counting stand-in for the events topic.

What this does not include: the Faust runtime around the agent (stream
buffering, RocksDB writes, changelog and event produce, exactly-once
commits). Measuring a whole worker is the plan in docs/benchmarks.md.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from bench.context import Bench
from bench.stats import Result
from krabka.format.records import Kind, decode_key, decode_lease, decode_registration

PARTITIONS = 16
MEMBERS = ("worker-1.example:6066", "worker-2.example:6066")


WORKLOADS = ("contiguous", "interleaved")
"""How a state topic is filled (`fill`): ``contiguous``, each role's records back to
back, written in producer batches without transactions; ``interleaved``, as a
cluster writes it, the roles of a partition in round-robin and every record its
own transaction (so a commit marker follows each record)."""

def role_records(i: int, now: int, leases: int = 18
                 ) -> tuple[str, list[tuple[bytes, bytes, int]]]:
    """Role `i`'s name and records (key, value, Kafka timestamp): two registrations and
    `leases` lease records in two tenures (the second member fences the first half
    way), each stamped when its lease was granted, so that no lease lapses before
    the role's next record however long the fill takes."""
    from krabka.format.records import (
        Lease,
        Registration,
        encode_key,
        encode_lease,
        encode_registration,
        lease_key,
        registration_key,
    )

    role = f"acme.fold-{i:06d}"
    records = [(encode_key(registration_key(role, m)), encode_registration(Registration(m, now)),
                now) for m in MEMBERS]
    key = encode_key(lease_key(role))
    half = max(1, leases // 2)
    for r in range(leases):
        holder = MEMBERS[min(r // half, 1)]
        granted = now + r * 1000
        records.append((key, encode_lease(Lease(holder, 5000 + i, min(r // half, 1), granted,
                                                granted + 3000)), granted))
    return role, records


async def fill(bench: Bench, topic: str, records: int, *, leases: int = 18,
               workload: str = "contiguous") -> tuple[int, dict[int, int]]:
    """`records` state records (`role_records` of ``records // (2 + leases)`` roles)
    filled as `workload` says (`WORKLOADS`); how many were sent, and per partition
    the offset after its last record (a transactional partition's end is one
    further, past the last commit marker)."""
    from aiokafka import AIOKafkaProducer

    from krabka.format.partition import role_partition

    now = int(time.time() * 1000)
    roles = [role_records(i, now, leases) for i in range(max(1, records // (2 + leases)))]
    after: dict[int, int] = {}

    def sent_to(partition: int, offset: int) -> None:
        after[partition] = max(after.get(partition, 0), offset + 1)

    if workload == "contiguous":
        producer = AIOKafkaProducer(bootstrap_servers=bench.bootstrap, acks="all",
                                    linger_ms=20, max_batch_size=512 * 1024)
        await producer.start()
        try:
            sent = 0
            pending = []
            for role, batch in roles:
                partition = role_partition(role, PARTITIONS)
                for k, v, ts in batch:
                    pending.append(await producer.send(topic, v, key=k, partition=partition,
                                                       timestamp_ms=ts))
                    sent += 1
                if len(pending) > 5000:
                    for future in pending:
                        metadata = await future
                        sent_to(metadata.partition, metadata.offset)
                    pending.clear()
            for future in pending:
                metadata = await future
                sent_to(metadata.partition, metadata.offset)
            return sent, after
        finally:
            await producer.stop()
    if workload != "interleaved":
        raise ValueError(f"unknown fold workload {workload!r}; one of {', '.join(WORKLOADS)}")
    by_partition: dict[int, list[list[tuple[bytes, bytes, int]]]] = {}
    for role, batch in roles:
        by_partition.setdefault(role_partition(role, PARTITIONS), []).append(batch)

    async def write(partition: int, batches: list[list[tuple[bytes, bytes, int]]]) -> int:
        producer = AIOKafkaProducer(bootstrap_servers=bench.bootstrap, acks="all",
                                    transactional_id=f"bench-fill-{topic}-{partition}")
        await producer.start()
        try:
            count = 0
            for r in range(max(len(batch) for batch in batches)):
                for batch in batches:  # the partition's roles in round-robin
                    if r < len(batch):
                        key, value, ts = batch[r]
                        async with producer.transaction():
                            future = await producer.send(topic, value, key=key,
                                                         partition=partition, timestamp_ms=ts)
                        sent_to(partition, (await future).offset)
                        count += 1
            return count
        finally:
            await producer.stop()

    counts = await asyncio.gather(*(write(p, b) for p, b in sorted(by_partition.items())))
    return sum(counts), after


class _Metrics:
    def skip(self, *args: Any) -> None:
        pass

    def event(self, *args: Any) -> None:
        pass


class _Feed:
    def publish(self, event: Any) -> None:
        pass


@dataclass(eq=False)
class _Event:
    """What the fold reads of a Faust event (weakly referable, as Faust's are)."""

    message: Any


class _Events:
    def __init__(self) -> None:
        self.sent = 0

    async def send(self, **kwargs: Any) -> None:
        self.sent += 1


async def consume(bench: Bench, topic: str, handle: Any) -> int:
    """Read every partition of `topic` to its end (read_committed), `handle` per
    fetched list of one partition's records."""
    return await consume_from(bench.bootstrap, topic, handle)


async def consume_from(bootstrap: str, topic: str, handle: Any) -> int:
    """`consume` from the cluster at `bootstrap`."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap,
                                isolation_level="read_committed", enable_auto_commit=False,
                                group_id=None, max_partition_fetch_bytes=4 * 2**20,
                                fetch_max_bytes=32 * 2**20)
    await consumer.start()
    try:
        ends, remaining = await _from_start(consumer, topic)
        count = 0
        while remaining:
            batch = await consumer.getmany(*remaining, timeout_ms=500, max_records=10_000)
            for messages in batch.values():
                await handle(messages)
                count += len(messages)
            # The position, not the last record's offset: a transactional topic's
            # last offset is a commit marker, which the consumer skips.
            for tp in list(remaining):
                if await consumer.position(tp) >= ends[tp]:
                    remaining.discard(tp)
        return count
    finally:
        await consumer.stop()


async def _from_start(consumer: Any, topic: str) -> tuple[dict[Any, int], set[Any]]:
    """Assign `consumer` every partition of `topic` at offset 0: each partition's
    end, and the partitions with anything to read."""
    from aiokafka import TopicPartition

    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    ends = await consumer.end_offsets(tps)
    for tp in tps:
        consumer.seek(tp, 0)
    return ends, {tp for tp in tps if ends[tp] > 0}


async def same_work(bench: Bench, topic: str, name: str) -> tuple[int, float]:
    """The same-work baseline: a plain aiokafka exactly-once pipeline folding `topic`.

    One read_committed consumer of a group of its own and one transactional
    producer; per fetched batch (at most `agents.fold.agent.FOLD_BATCH` records,
    the fold's chunk), in one transaction: the chunk folded with the worker's
    pure fold (`agents.fold.chunk.fold_chunk`, values read from and written to a
    dict of their bytes, as the worker's table holds them), each role's value
    written once to a changelog topic,
    each event published to an events topic, and the consumed offsets
    committed. What it leaves out of the worker's work: Faust, RocksDB, the
    web view, the tick. Returns the records folded and the seconds it took.
    """
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    from agents.fold import partition_value, role_value
    from agents.fold.agent import FOLD_BATCH, _record
    from agents.fold.chunk import fold_chunk
    from agents.fold.partition_value import partition_key
    from app.settings import Settings

    changelog, events = f"{name}-changelog", f"{name}-events"
    for each in (changelog, events):
        await bench.create_topic(each, PARTITIONS)
    options = Settings(partitions=PARTITIONS).leadership_options
    roles: dict[bytes, bytes] = {}
    partitions: dict[int, bytes] = {}

    def load(key: bytes) -> Any:
        raw = roles.get(key)
        return None if raw is None else role_value.decode(raw)

    def load_partition(partition: int) -> Any:
        raw = partitions.get(partition)
        return None if raw is None else partition_value.decode(raw)

    consumer = AIOKafkaConsumer(bootstrap_servers=bench.bootstrap, group_id=name,
                                isolation_level="read_committed", enable_auto_commit=False,
                                auto_offset_reset="earliest",
                                max_partition_fetch_bytes=4 * 2**20, fetch_max_bytes=32 * 2**20)
    # A produce right after the previous transaction's commit can find its markers
    # still being written (CONCURRENT_TRANSACTIONS, which the broker's verification
    # of the transaction reports as NOT_ENOUGH_REPLICAS): retried after 5 ms, not
    # aiokafka's 100 ms, or the baseline waits a tenth of a second per chunk.
    producer = AIOKafkaProducer(bootstrap_servers=bench.bootstrap, acks="all",
                                transactional_id=f"{name}-fold", linger_ms=5,
                                max_batch_size=512 * 1024, retry_backoff_ms=5)
    await consumer.start()
    await producer.start()
    try:
        ends, remaining = await _from_start(consumer, topic)
        count = 0
        started = time.perf_counter()
        while remaining:
            batch = await consumer.getmany(*remaining, timeout_ms=500, max_records=FOLD_BATCH)
            records = [(tp.partition, _record(_Message(m))) for tp, messages in batch.items()
                       for m in messages]
            if records:
                chunk = fold_chunk(records, load, load_partition, PARTITIONS,
                                   placement=options.placement,
                                   challenge_stagger=options.challenge_stagger)
                async with producer.transaction():
                    for _, caused in chunk.events:
                        for event in caused:
                            await producer.send(events, event.encode(),
                                                key=event.role.encode("utf-8"),
                                                partition=event.partition)
                    for key, (value, _) in chunk.values.items():
                        raw = roles[key] = role_value.encode(value)
                        await producer.send(changelog, raw, key=key, partition=value.partition)
                    for partition, (counted, _) in chunk.partitions.items():
                        raw = partitions[partition] = partition_value.encode(counted)
                        await producer.send(changelog, raw, key=partition_key(partition),
                                            partition=partition)
                    await producer.send_offsets_to_transaction(
                        {tp: messages[-1].offset + 1 for tp, messages in batch.items()
                         if messages}, name)
                count += len(records)
            for tp in list(remaining):
                if await consumer.position(tp) >= ends[tp]:
                    remaining.discard(tp)
        return count, time.perf_counter() - started
    finally:
        await producer.stop()
        await consumer.stop()


class _Message:
    """An aiokafka record as the fold reads a Faust message (timestamp in seconds)."""

    __slots__ = ("key", "offset", "timestamp", "value")

    def __init__(self, record: Any) -> None:
        self.offset, self.key, self.value = record.offset, record.key, record.value
        self.timestamp = record.timestamp / 1000


async def decode_only(messages: list[Any]) -> None:
    """The raw baseline's step: decode each record's key and value, nothing else."""
    for message in messages:
        key = decode_key(message.key)
        if message.value:
            if key.kind == Kind.LEASE:
                decode_lease(message.value)
            else:
                decode_registration(message.value)


async def fold_throughput(bench: Bench) -> None:
    try:
        from agents.fold.agent import FOLD_BATCH, apply_batch
        from agents.fold.due import DueIndex
        from app.settings import Settings
    except ImportError as exc:
        for system in ("krabka", "aiokafka-raw"):
            bench.skip_result("fold-throughput", system, "records/s",
                              f"the worker application is not importable: {exc}")
        return
    records = 20_000 if bench.quick else 200_000
    trials = max(3, min(bench.trials, 10))
    for workload in bench.fold_workloads:
        topic = f"bench-fold-{workload}-{bench.run_id}"
        await bench.create_topic(topic, PARTITIONS)
        filled, _ = await fill(bench, topic, records, workload=workload)
        rates: dict[str, list[float]] = {"krabka": [], "aiokafka-raw": []}
        events = _Events()
        for i in range(trials):
            order = ["aiokafka-raw", "krabka"] if i % 2 == 0 else ["krabka", "aiokafka-raw"]
            for system in order:
                if system == "krabka":
                    # What `apply_batch` reads of the worker's `app.context.Context`.
                    ctx = SimpleNamespace(
                        tables=SimpleNamespace(role_state={}, partition_state={}),
                        partitions=PARTITIONS, metrics=_Metrics(), events_topic=events,
                        settings=Settings(partitions=PARTITIONS), fold_lock=asyncio.Lock(),
                        feed=_Feed(), due=DueIndex())

                    async def fold(messages: list[Any], ctx: Any = ctx) -> None:
                        events: list[Any] = [_Event(SimpleNamespace(
                            partition=m.partition, offset=m.offset, key=m.key, value=m.value,
                            timestamp=m.timestamp / 1000)) for m in messages]
                        for start in range(0, len(events), FOLD_BATCH):
                            await apply_batch(ctx, events[start:start + FOLD_BATCH])
                    handler: Callable[[list[Any]], Awaitable[None]] = fold
                else:
                    handler = decode_only
                started = time.perf_counter()
                count = await consume(bench, topic, handler)
                rates[system].append(count / (time.perf_counter() - started))
                print(f"  [fold-throughput] {workload} {system} trial {i + 1}/{trials}: "
                      f"{count} records", flush=True)
        for system, samples in rates.items():
            bench.add(Result(
                "fold-throughput", system, "records/s", samples,
                bench.config(records=filled, partitions=PARTITIONS, trials_run=trials,
                             roles=max(1, records // 20), workload=workload,
                             what=("agents.fold.agent.apply_batch with dict tables "
                                   "(no Faust runtime, RocksDB, changelog or commits)"
                                   if system == "krabka" else
                                   "read_committed consume + decode_key/decode_* per record")),
                higher_is_better=True, metric=workload))

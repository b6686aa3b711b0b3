"""fold-throughput: state records folded per second vs a raw consume-and-decode loop.

A 16-partition copy of the state topic is filled with registrations, leases
and renewals of many roles. Each trial reads it all from the start with one
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
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from bench.context import Bench
from bench.stats import Result
from coordination import Kind, decode_key, decode_lease, decode_registration

PARTITIONS = 16
MEMBERS = ("worker-1.example:6066", "worker-2.example:6066")


async def fill(bench: Bench, topic: str, records: int, *, leases: int = 18) -> int:
    """`records` state records: per role two registrations and `leases` lease records
    (two tenures), written with the library's codec; returns how many were sent."""
    from aiokafka import AIOKafkaProducer

    from coordination import (
        Lease,
        Registration,
        encode_key,
        encode_lease,
        encode_registration,
        lease_key,
        registration_key,
        role_partition,
    )

    producer = AIOKafkaProducer(bootstrap_servers=bench.bootstrap, acks="all", linger_ms=20,
                                max_batch_size=512 * 1024)
    await producer.start()
    try:
        now = int(time.time() * 1000)
        roles = max(1, records // (2 + leases))
        sent = 0
        pending = []
        for i in range(roles):
            role = f"acme.fold-{i:06d}"
            partition = role_partition(role, PARTITIONS)
            batch: list[tuple[bytes, bytes | None]] = [
                (encode_key(registration_key(role, m)), encode_registration(Registration(m, now)))
                for m in MEMBERS]
            key = encode_key(lease_key(role))
            half = max(1, leases // 2)
            for r in range(leases):
                holder = MEMBERS[min(r // half, 1)]
                batch.append((key, encode_lease(Lease(holder, 5000 + i, min(r // half, 1),
                                                      now + r * 1000, now + r * 1000 + 3000))))
            for k, v in batch:
                pending.append(await producer.send(topic, v, key=k, partition=partition))
                sent += 1
            if len(pending) > 5000:
                for future in pending:
                    await future
                pending.clear()
        for future in pending:
            await future
        return sent
    finally:
        await producer.stop()


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
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap,
                                isolation_level="read_committed", enable_auto_commit=False,
                                group_id=None, max_partition_fetch_bytes=4 * 2**20,
                                fetch_max_bytes=32 * 2**20)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        remaining = {tp for tp in tps if ends[tp] > 0}
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
    topic = f"bench-fold-{bench.run_id}"
    await bench.create_topic(topic, PARTITIONS)
    filled = await fill(bench, topic, records)

    rates: dict[str, list[float]] = {"krabka": [], "aiokafka-raw": []}
    events = _Events()
    trials = max(3, min(bench.trials, 10))
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
                    events = [_Event(SimpleNamespace(
                        partition=m.partition, offset=m.offset, key=m.key, value=m.value,
                        timestamp=m.timestamp / 1000)) for m in messages]
                    for start in range(0, len(events), FOLD_BATCH):
                        await apply_batch(ctx, events[start:start + FOLD_BATCH])
                handler = fold
            else:
                handler = decode_only
            started = time.perf_counter()
            count = await consume(bench, topic, handler)
            rates[system].append(count / (time.perf_counter() - started))
            print(f"  [fold-throughput] {system} trial {i + 1}/{trials}: {count} records",
                  flush=True)
    for system, samples in rates.items():
        bench.add(Result(
            "fold-throughput", system, "records/s", samples,
            bench.config(records=filled, partitions=PARTITIONS, trials_run=trials,
                         roles=max(1, records // 20),
                         what=("agents.fold.agent.apply_batch with dict tables "
                               "(no Faust runtime, RocksDB, changelog or commits)"
                               if system == "krabka" else
                               "read_committed consume + decode_key/decode_* per record")),
            higher_is_better=True))

"""term-authority-check: what term mode's authority check reads, by roles and by claims.

`describe_leadership(transport, role, fencing="term")` folds the role's
partition of the terms topic from its log start to its end
(docs/term-mode.md#a-bounded-terms-topic). Epoch mode's check is one
DescribeTransactions request whatever the history (authority-check).

- ``roles-N``: N roles on a 16-partition terms topic, each with what the
  cleaner leaves of a settled role (its winning claim and its heartbeat),
  so the partition read holds about 2 N / 16 records;
- ``claims-C-settled``: one role claimed C times on a one-partition terms
  topic the cleaner compacts at once, each claim followed by the winner's
  tombstone of the claim before it (what `krabka.term.compaction`
  writes on an uncontested hand-over); timed once the cleaner has left the
  role its last claim and its heartbeat;
- ``claims-C-unsettled``: the same C claims with no tombstones, as before
  the winners settled their claims: every claim is read.

Each sample is one call from this process (the KafkaTransport's reader
connection is warm); the records each call folds are in the result's
``extra``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench.context import Bench
from bench.stats import Result
from krabka import TermToken, describe_leadership
from krabka.format.partition import role_partition
from krabka.format.terms import (
    Claim,
    Heartbeat,
    claim_key,
    decode_term_key,
    encode_claim,
    encode_heartbeat,
    encode_term_key,
    heartbeat_key,
)
from krabka.kafka import KafkaTransport

FIGURE = "term-authority-check"
PARTITIONS = 16
IN_FLIGHT = 2000
EAGER = {"segment.ms": "1000", "min.cleanable.dirty.ratio": "0.01",
         "delete.retention.ms": "1000", "min.compaction.lag.ms": "0"}
COMPACTION_WITHIN = 300.0


async def _append_all(bench: Bench, topic: str,
                      records: list[tuple[int, bytes, bytes | None]]) -> None:
    """Append `records` ((partition, key, value)) to `topic` in their order.

    One idempotent producer, each record enqueued before the next (so a
    partition's records keep their order), at most `IN_FLIGHT` unacknowledged.
    """
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bench.bootstrap, enable_idempotence=True,
                                linger_ms=5, max_batch_size=1 << 20)
    await producer.start()
    try:
        for start in range(0, len(records), IN_FLIGHT):
            pending = [await producer.send(topic, value, key=key, partition=partition)
                       for partition, key, value in records[start:start + IN_FLIGHT]]
            await asyncio.gather(*pending)
    finally:
        await producer.stop()


def _settled_role(role: str, partition: int, term: int) -> list[tuple[int, bytes, bytes | None]]:
    member = f"member-{term % 2}"
    return [(partition, encode_term_key(claim_key(role, member, term)),
             encode_claim(Claim(member, term, 0))),
            (partition, encode_term_key(heartbeat_key(role)),
             encode_heartbeat(Heartbeat(member, term, 0, False)))]


async def _time_calls(transport: KafkaTransport, role: str, partitions: int, calls: int,
                      term: int) -> list[float]:
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        status = await describe_leadership(transport, role, fencing="term",
                                           partitions=partitions)
        samples.append((time.perf_counter() - started) * 1000)
        if status.token != TermToken(term):
            raise RuntimeError(f"{role}: expected term {term}, the check answered {status}")
    return samples


async def _records_read(transport: KafkaTransport, partition: int) -> int:
    return len((await transport.read_terms(partition)).records)


async def _records_of(transport: KafkaTransport, role: str) -> int:
    """How many records of `role` partition 0 holds (tombstones included)."""
    return sum(1 for record in (await transport.read_terms(0)).records
               if decode_term_key(record.key).role == role)


async def term_authority_check(bench: Bench) -> None:
    """The term-mode authority check at `bench.term_roles` roles and after `bench.term_claims`."""
    calls = 20 if bench.quick else 100
    for n in bench.term_roles:
        topic = f"bench-term-roles-{bench.run_id}-{n}"
        await bench.create_topic(topic, PARTITIONS, compact=True)
        transport = KafkaTransport(bench.bootstrap, topic=bench.state_topic, terms_topic=topic)
        try:
            roles = [bench.role("term-authority", f"{n}-{i}") for i in range(n)]
            records = [r for i, role in enumerate(roles)
                       for r in _settled_role(role, role_partition(role, PARTITIONS), i + 1)]
            written = time.monotonic()
            await _append_all(bench, topic, records)
            written = time.monotonic() - written
            role = roles[-1]
            await _time_calls(transport, role, PARTITIONS, 5, n)  # warm the reader
            samples = await _time_calls(transport, role, PARTITIONS, calls, n)
            read = await _records_read(transport, role_partition(role, PARTITIONS))
            bench.add(Result(FIGURE, "krabka-term", "ms", samples, bench.config(
                calls=calls, roles=n, partitions=PARTITIONS,
                what="describe_leadership(fencing='term'): the role's terms partition "
                     "from its log start, folded"),
                metric=f"roles-{n}", extra={"records_read": read,
                                            "write_s": round(written, 1)}))
        finally:
            await transport.close()
    for settled in (True, False):
        await _claims(bench, bench.term_claims, settled, max(5, calls // 5))


async def _claims(bench: Bench, count: int, settled: bool, calls: int) -> None:
    kind = "settled" if settled else "unsettled"
    topic = f"bench-term-claims-{bench.run_id}-{kind}"
    await bench.create_topic(topic, 1, compact=True, configs=EAGER if settled else None)
    transport = KafkaTransport(bench.bootstrap, topic=bench.state_topic, terms_topic=topic)
    role = bench.role("term-authority", f"claims-{kind}")
    try:
        records: list[tuple[int, bytes, bytes | None]] = []
        for term in range(1, count + 1):
            member = f"member-{term % 2}"
            records.append((0, encode_term_key(claim_key(role, member, term)),
                            encode_claim(Claim(member, term, 0))))
            if settled and term > 1:
                records.append((0, encode_term_key(
                    claim_key(role, f"member-{(term - 1) % 2}", term - 1)), None))
        records.append((0, encode_term_key(heartbeat_key(role)),
                        encode_heartbeat(Heartbeat(f"member-{count % 2}", count, 0, False))))
        started = time.monotonic()
        await _append_all(bench, topic, records)
        written = time.monotonic() - started
        compacted = 0.0
        if settled:
            started = time.monotonic()
            roll = (0, encode_term_key(heartbeat_key(f"{role}.roll")),
                    encode_heartbeat(Heartbeat("roll", 1, 0, False)))
            while True:
                # The cleaner cleans closed segments only: an append closes the active one.
                await transport.append_term(*roll)
                left = await _records_of(transport, role)
                if left <= 2:
                    break
                if time.monotonic() - started > COMPACTION_WITHIN:
                    raise TimeoutError(f"the cleaner left {left} records of the role "
                                       f"after {COMPACTION_WITHIN:g} s")
                await asyncio.sleep(1.0)
            compacted = time.monotonic() - started
        await _time_calls(transport, role, 1, 2, count)
        samples = await _time_calls(transport, role, 1, calls, count)
        extra: dict[str, Any] = {"records_read": await _records_read(transport, 0),
                                 "records_written": len(records),
                                 "write_s": round(written, 1)}
        if settled:
            extra["compaction_s"] = round(compacted, 1)
        bench.add(Result(FIGURE, "krabka-term", "ms", samples, bench.config(
            calls=calls, claims=count, partitions=1,
            what="describe_leadership(fencing='term') of one role after its claims: "
                 + ("each winner tombstoned the claim before it, then the cleaner ran"
                    if settled else "no tombstones (every claim read)")),
            metric=f"claims-{count}-{kind}", extra=extra))
    finally:
        await transport.close()

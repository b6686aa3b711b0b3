"""A Faust agent that reads a term-mode leader's output through a `TermFilter`.

    faust -A examples.term_reader.faust_app worker -l info

In term mode the broker accepts a deposed leader's writes; readers drop them
(docs/term-mode.md#the-filter). The agent ``filter-output`` hands every
record of the output topic to a `TermFilter` and handles only what it
admits; ``GET /term-reader/`` shows what this worker admitted and dropped.

The marks live in the Faust table ``term-marks``, one entry per partition
of the output topic (the filter's `save_text` and the offset after the last
record judged), written with every record. A Faust table is
changelog-backed and co-partitioned with the agent's topic: the entry of
partition p is written to partition p of the changelog, and whichever
worker is assigned p after a restart or a rebalance recovers it before its
agent sees p's next record. Faust commits offsets itself with empty
offset-commit metadata and has no public way to add any, so the table is
the place Faust offers (README.md beside this file).

On a partition's first record after an assignment the agent restores the
entry, and seeds the filter with each role's highest term from the terms
topic (``krabka.term.seed.highest_terms``) when that record is past the one it
expects: the saved offset, or offset 0 with no entry (a new group starts at
the log start). Then records it never judged are gone (retention or
DeleteRecords removed them, perhaps a newer term's barrier among them),
and a reader mid-log without the marks they would have left cannot tell a
zombie's record from a current one: it fails closed. (A leader's writes
are not transactional, so the offsets of its outputs have no gaps of their
own.)

With the default ``at_least_once`` guarantee, Faust flushes the changelog
before it commits offsets, so the saved marks are never behind the
committed offset; they can be ahead of it after a crash, and then a
record of the old term that preceded the newer barrier, delivered once
already, is dropped when it is read again. No superseded record passes
either way.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Set as AbstractSet
from typing import Any

from app.faust_changes import ChangedApp
from krabka import TermFilter
from krabka.defaults import TERMS_TOPIC
from krabka.kafka import KafkaTransport
from krabka.term.seed import highest_terms

log = logging.getLogger("term_reader")

TOPIC = os.environ.get("TERM_READER_TOPIC", "orders")
# The output topic's partition count: the table's changelog must match it.
PARTITIONS = int(os.environ.get("TERM_READER_PARTITIONS", "1"))
BOOTSTRAP = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
# The roles that write the topic (comma-separated; empty: every role on the
# terms topic): their highest terms seed a partition read without its marks.
ROLES = [role for role in os.environ.get("TERM_READER_ROLES", "").split(",") if role] or None

# Faust 0.15.3 can skip a record for good at the end of a rebalance or a
# start (docs/upstream/FAUST-12.md): an app of the worker's Faust classes
# carries the worker's change for it.
app = ChangedApp(
    os.environ.get("TERM_READER_APP_ID", "term-reader"),
    broker=f"kafka://{BOOTSTRAP}",
    web_port=int(os.environ.get("TERM_READER_WEB_PORT", "6066")),
    web_bind="127.0.0.1",
    datadir=os.environ.get("TERM_READER_DATA_DIR", "term-reader-data"),
    topic_partitions=PARTITIONS,
)

# Keys and values as bytes: barriers carry binary term records.
output = app.topic(TOPIC, key_serializer="raw", value_serializer="raw")
marks = app.Table("term-marks", key_type=str, value_type=str, partitions=PARTITIONS)

# Every record on the topic must carry the term header; one without it is dropped.
term_filter = TermFilter(fenced_topics=[TOPIC])
restored: set[int] = set()
"""Partitions whose saved marks this worker has restored since it was assigned them."""
admitted: list[dict[str, Any]] = []
terms: list[KafkaTransport] = []
"""The reader of the terms topic, opened on the first seed."""


async def seed(partition: int) -> None:
    """Raise `partition`'s marks to each role's highest term on the terms topic.

    Called on the partition's first record, so the terms topic is read after
    the position was fixed: every barrier below it has its claim in the read.
    """
    if not terms:
        terms.append(KafkaTransport(
            BOOTSTRAP, terms_topic=os.environ.get("TERM_READER_TERMS_TOPIC", TERMS_TOPIC)))
    reader = terms[0]
    count = await reader.output_partitions(reader.terms_topic)
    for role, term in (await highest_terms(reader, count, ROLES)).items():
        term_filter.seed(TOPIC, partition, role, term)


def resume(partition: int, offset: int) -> bool:
    """Restore `partition`'s saved marks; whether it must be seeded too.

    A first record past the one expected (the saved offset, or the log's
    first with no entry) means records this reader never judged are gone.
    """
    saved = marks.get(str(partition))
    if not saved:
        return offset > 0
    entry = json.loads(saved)
    term_filter.restore_text(TOPIC, partition, entry["marks"])
    return bool(offset > entry["next"])


@app.on_before_shutdown.connect
async def close_terms(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
    for reader in terms:
        await reader.close()


@app.on_partitions_revoked.connect
async def forget_revoked(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
    revoked: AbstractSet[Any] = args[0]  # Faust sends the revoked partitions positionally
    # Another worker may move the marks while it holds the partition: restore
    # them from the table again if this one gets it back.
    restored.difference_update(tp.partition for tp in revoked if tp.topic == TOPIC)


@app.agent(output, name="filter-output")
async def filter_output(stream: Any) -> None:
    async for event in stream.events():
        message = event.message
        key = str(message.partition)
        if message.partition not in restored:
            if resume(message.partition, message.offset):
                await seed(message.partition)
                log.info("seeded partition %d at offset %d", message.partition,
                         message.offset)
            restored.add(message.partition)
        headers = message.headers or []
        pairs = headers.items() if isinstance(headers, dict) else headers
        verdict = term_filter.admit(message.topic, message.partition, pairs)
        marks[key] = json.dumps({"next": message.offset + 1, "marks": term_filter.save_text(
            message.topic, message.partition)})
        if verdict == "pass":
            admitted.append({"partition": message.partition, "offset": message.offset,
                             "value": event.value.decode(errors="replace")})
            log.info("admitted partition %d offset %d", message.partition, message.offset)
        elif verdict == "drop":
            log.info("dropped partition %d offset %d", message.partition, message.offset)


@app.page("/term-reader/")
async def show(web: Any, request: Any) -> Any:
    return web.json({"admitted": admitted, "dropped": term_filter.dropped})

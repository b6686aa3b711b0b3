"""A plain aiokafka consumer of a term-mode leader's output, with the fence applied.

    python -m examples.term_reader.consumer --topic orders --group orders-reader --role billing

In term mode the broker accepts a deposed leader's writes; readers drop them
(docs/term-mode.md#the-filter). This reader hands every record to a
`TermFilter`, prints the records it admits as JSON lines, and commits its
offsets with the filter's marks in the offset-commit metadata after every
batch, so a restarted reader resumes with the marks it had
(`krabka.kafka.resume`). A partition the group never committed starts
at its end, seeded with each role's highest term from the terms topic.

The reader reads every partition of the topic (manual assignment: one
reader per group). A group of several readers would do the same per
assigned partition, calling `resume` in its ``on_partitions_assigned`` and
`commit_marks` in ``on_partitions_revoked``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
from collections.abc import Iterable
from types import TracebackType
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import ConsumerRecord

from krabka import TermFilter
from krabka.defaults import TERMS_TOPIC
from krabka.kafka import KafkaTransport, Resumed, commit_marks, resume


class FencedReader:
    """Reads `topic` for consumer group `group_id`, dropping superseded terms' records.

    `roles` are the term-mode roles that write the topic: their highest
    terms seed a partition read from its end, and only theirs are saved
    with the offsets (None: every role on the terms topic).
    """

    def __init__(self, bootstrap: str, topic: str, group_id: str, *,
                 roles: Iterable[str] | None = None, terms_topic: str = TERMS_TOPIC) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.group_id = group_id
        self.roles = None if roles is None else sorted(roles)
        # Every record on the topic must carry a term header: one without it
        # cannot be judged, so it is dropped (counted as "unstamped").
        self.filter = TermFilter(fenced_topics=[topic])
        self.started: dict[TopicPartition, Resumed] = {}
        self._terms = KafkaTransport(bootstrap, terms_topic=terms_topic)
        # A position that retention passes later goes to the new log start, not
        # past records nobody judged (`resume`'s seed covers the removed barriers).
        self._consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group_id,
                                          enable_auto_commit=False,
                                          auto_offset_reset="earliest")
        self._admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        self._next: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}

    async def __aenter__(self) -> FencedReader:
        try:
            await self._admin.start()
            await self._consumer.start()
            count = await self._terms.output_partitions(self.topic)
            partitions = [TopicPartition(self.topic, p) for p in range(count)]
            self._consumer.assign(partitions)
            self.started = await resume(self._consumer, self._admin, self.group_id,
                                        self.filter, self._terms, partitions, self.roles)
            self._next = {tp: start.offset for tp, start in self.started.items()}
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()

    async def batch(self, timeout_ms: int = 1000) -> list[ConsumerRecord]:
        """The next records the filter admits (barriers and dropped records left out)."""
        fetched = await self._consumer.getmany(timeout_ms=timeout_ms)
        admitted = []
        for tp, records in sorted(fetched.items(), key=lambda item: item[0].partition):
            for record in records:
                if self.filter.admit(tp.topic, tp.partition, record.headers) == "pass":
                    admitted.append(record)
                self._next[tp] = record.offset + 1
        return admitted

    @property
    def positions(self) -> dict[TopicPartition, int]:
        """Per partition, the offset of the next record the filter will judge."""
        return dict(self._next)

    async def commit(self) -> None:
        """Commit the position after every record judged, with the marks it left.

        Also a partition that started at its end and has had no record yet:
        its seeded marks are then restored, not seeded again, after a restart.
        """
        changed = {tp: offset for tp, offset in self._next.items()
                   if self._committed.get(tp) != offset}
        await commit_marks(self._consumer, self.filter, changed)
        self._committed.update(changed)

    async def close(self) -> None:
        """Stop every client; what was not committed is read again after a restart."""
        for stop in (self._consumer.stop, self._admin.close, self._terms.close):
            with contextlib.suppress(Exception):
                await stop()


async def main(args: argparse.Namespace) -> None:
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    async with FencedReader(args.bootstrap_servers, args.topic, args.group,
                            roles=args.role or None, terms_topic=args.terms_topic) as reader:
        for tp, start in sorted(reader.started.items(), key=lambda item: item[0].partition):
            emit("started", partition=tp.partition, offset=start.offset, kind=start.kind)
        while not stopping.is_set():
            for record in await reader.batch(timeout_ms=500):
                emit("record", partition=record.partition, offset=record.offset,
                     value=record.value.decode(errors="replace") if record.value else None)
            # After the records are handled: a crash before it re-reads them.
            await reader.commit()
        emit("stopped", dropped=reader.filter.dropped)


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-servers", default="127.0.0.1:9092")
    parser.add_argument("--topic", required=True, help="the leader's declared output topic")
    parser.add_argument("--group", required=True, help="the consumer group to commit to")
    parser.add_argument("--role", action="append",
                        help="a role that writes the topic (repeat; default: every role)")
    parser.add_argument("--terms-topic", default=TERMS_TOPIC)
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse()))

"""An active/standby service on plain asyncio: lead a role, write fenced records.

Run several copies against the local broker (``make kafka-up``); one leads
and writes numbered records to an output topic inside guarded transactions,
the others wait. Kill the leader (Ctrl-C resigns at once; ``kill -9`` makes
the next member take over after the lease) and watch another take over.

    python examples/leader_service.py --member a --create-topics
    python examples/leader_service.py --member b

With ``--fencing term`` (docs/term-mode.md) the copies elect by claims on the
terms topic instead of transactions, and the output topic is the leader's
declared output: every record carries the term in its header, and a reader
that applies `krabka.TermFilter` drops a deposed leader's records.

Every line the service prints is a JSON object (``event``: ``leading``,
``wrote``, ``fenced``, ``resigned``, ``done``), so a test or a log pipeline
can follow it. A record it writes carries member, token (``producer_id`` and
``producer_epoch``, or ``term``), tenure and a per-tenure sequence number; in
epoch mode a deposed leader's records never become visible to read_committed
consumers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import signal
import sys
import time
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from krabka import (
    LeaderRunner,
    Leadership,
    LeadershipOptions,
    RunnerObserver,
    TermToken,
)
from krabka.defaults import FENCING, PARTITIONS, STATE_TOPIC, TERMS_TOPIC
from krabka.kafka import KafkaTransport
from krabka.options import FENCINGS


def emit(event: str, **fields: Any) -> None:
    """Print one JSON line and flush, so a reader sees it at once."""
    print(json.dumps({"event": event, "t_ms": time.time_ns() // 1_000_000, **fields}),
          flush=True)


async def create_topics(bootstrap: str, state_topic: str, terms_topic: str, output: str,
                        partitions: int) -> None:
    """Create the state and terms topics (compacted) and the output topic if they are missing."""
    compacted = {"cleanup.policy": "compact", "segment.ms": "600000"}
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        for topic in (
            NewTopic(state_topic, partitions, 1, topic_configs=compacted),
            NewTopic(terms_topic, partitions, 1, topic_configs=compacted),
            NewTopic(output, 1, 1),
        ):
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics([topic])
    finally:
        await admin.close()


def token_fields(leadership: Leadership) -> dict[str, int]:
    """The tenure's token as JSON fields: the producer's id and epoch, or the term."""
    token = leadership.token
    if isinstance(token, TermToken):
        return {"term": token.term}
    return {"producer_id": token.producer_id, "producer_epoch": token.producer_epoch}


async def work(leadership: Leadership, output: str, interval: float) -> None:
    """While leading: one fenced record per interval, until the runner cancels it."""
    sequence = 0
    while True:
        sequence += 1
        record = {"member": leadership.member, **token_fields(leadership),
                  "tenure": leadership.tenure, "seq": sequence}
        async with leadership.transaction() as txn:
            await txn.send(output, json.dumps(record).encode(), partition=0)
        emit("wrote", seq=sequence, tenure=leadership.tenure)
        await asyncio.sleep(interval)


class Printer(RunnerObserver):
    """Prints the runner's reports as JSON lines."""

    def __init__(self, member: str) -> None:
        self.member = member

    def elected(self, role: str, leadership: Leadership) -> None:
        emit("leading", member=self.member, tenure=leadership.tenure,
             **token_fields(leadership), fence_deadline=leadership.fence_deadline)

    def fenced(self, role: str, leadership: Leadership) -> None:
        emit("fenced", member=self.member, tenure=leadership.tenure, error=str(leadership.err))

    def resigned(self, role: str, leadership: Leadership) -> None:
        emit("resigned", member=self.member, tenure=leadership.tenure)


async def serve(args: argparse.Namespace) -> int:
    if args.create_topics:
        await create_topics(args.bootstrap_servers, args.topic, args.terms_topic, args.output,
                            args.partitions)
    # The topics the leader writes. Term mode's leader writes only to these
    # (each gets the term's barriers); epoch mode's producer fences every
    # topic, and a standby reads these topics' metadata ahead of its takeover.
    outputs = (args.output,)
    options = LeadershipOptions(args.partitions, args.lease, args.renew, args.stagger,
                                fencing=args.fencing, outputs=outputs)
    async with KafkaTransport(args.bootstrap_servers, topic=args.topic,
                              terms_topic=args.terms_topic) as transport:
        runner = LeaderRunner(
            transport, args.role, args.member,
            functools.partial(work, output=args.output, interval=args.interval),
            options=options, observer=Printer(args.member),
        )
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, lambda: asyncio.ensure_future(runner.stop()))
        # The runner stops the function first, then resigns: a successor
        # never starts while this copy still writes.
        await runner.run()
    emit("done", member=args.member)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap-servers", default="127.0.0.1:9092")
    parser.add_argument("--role", default="example.leader-service")
    parser.add_argument("--member", required=True)
    parser.add_argument("--topic", default=STATE_TOPIC)
    parser.add_argument("--terms-topic", default=TERMS_TOPIC, help="term mode's claims")
    parser.add_argument("--fencing", choices=FENCINGS, default=FENCING)
    parser.add_argument("--output", default="example.leader-service.output")
    parser.add_argument("--partitions", type=int, default=PARTITIONS)
    parser.add_argument("--lease", type=float, default=3.0)
    parser.add_argument("--renew", type=float, default=1.0)
    parser.add_argument("--stagger", type=float, default=0.5)
    parser.add_argument("--interval", type=float, default=0.2,
                        help="seconds between fenced writes while leading")
    parser.add_argument("--create-topics", action="store_true")
    return asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())

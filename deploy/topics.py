"""Create the topics the worker group needs, or check the ones that exist.

    python deploy/topics.py --bootstrap-servers 127.0.0.1:9092 --partitions 16
    python deploy/topics.py --replication-factor 3 --demo   # production-like, plus demo topic

Creates ``__coordination_state`` (compacted, short ``segment.ms`` so the
cleaner can compact it), term mode's ``__coordination_terms`` (compacted
likewise: each winner tombstones the claims its win settled, so the cleaner
keeps a role's latest winning claim and terms never restart; a reader that
misses one of those tombstones loses nothing, so they are kept 10 minutes,
not a day), and ``coordination-leadership-changes``, all with the
same partition count (a role's records are in the same partition of each;
the fold publishes each role's events to its own partition, and Faust
requires co-partitioned topics to have equal counts). The terms topic is
created whatever the fencing mode, so a group can move to term mode without
a new topic. With ``--demo`` also the demo role's one-partition output topic.
Faust creates its own internal topics (table changelogs, ticks) when the
first worker starts.

The state and terms topics are made by the library's `ensure_topics` (what
``krabka create-topics --fencing term`` runs), so they have the settings the
members' start-up check asks for; this script adds the events and demo topics.

Idempotent: an existing topic is checked, not changed. A state or terms topic
that is not exactly ``cleanup.policy=compact``, or any of them with another
partition count, is an error naming the fix, the state and terms topics' the
library's start-up check raises: two counts would split a role across two
partitions.

The cluster is reached as the worker reaches it: ``KAFKA_BOOTSTRAP_SERVERS``,
``KAFKA_SECURITY_PROTOCOL``, ``KAFKA_SASL_*`` and ``KAFKA_SSL_*``, or the
matching flags (``--security-protocol SASL_SSL`` ...; ``--help`` lists them),
read by `krabka.kafka.Connection`. Its principal needs Create and
Describe on the topics (DescribeConfigs too for an existing state or terms topic):
the worker's own principal does not have Create on them.

Production settings (see docs/deploy.md): ``--replication-factor 3`` (then
``min.insync.replicas=2`` is set on each topic) and broker-side
``auto.create.topics.enable=false``. Exit status: 0 ready, 1 a mismatch or an
error of the cluster (an authorization failure among them), 2 bad connection
settings or a cluster that could not be reached.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import BrokerResponseError, KafkaError, TopicAlreadyExistsError, for_code

# A script of the checkout: its defaults are the checkout's library's, not
# those of whatever version is installed.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from krabka.defaults import PARTITIONS, STATE_TOPIC, TERMS_TOPIC
from krabka.errors import ConfigurationError, CoordinationError
from krabka.kafka import KafkaUnavailableError, ensure_topics
from krabka.kafka.connection import Connection
from krabka.kafka.topics import topic_configs

EVENTS_TOPIC = "coordination-leadership-changes"
DEMO_TOPIC = "coordination-demo-output"


@dataclass(frozen=True)
class TopicSpec:
    """A topic to create, and what an existing one must match.

    `kind` marks the state and terms topics, which `ensure_topics` makes.
    """

    name: str
    partitions: int
    replication: int
    configs: dict[str, str] = field(default_factory=dict)
    kind: Literal["state", "terms"] | None = None


class TopicMismatch(Exception):
    """An existing topic the worker group cannot run on."""


def specs(partitions: int, replication: int, segment_ms: int, *, demo: bool,
          state_topic: str = STATE_TOPIC, terms_topic: str = TERMS_TOPIC,
          events_topic: str = EVENTS_TOPIC, demo_topic: str = DEMO_TOPIC) -> list[TopicSpec]:
    """The topics of a worker group with `partitions` state partitions."""
    durable = {"min.insync.replicas": "2"} if replication >= 3 else {}
    wanted = [
        TopicSpec(state_topic, partitions, replication,
                  topic_configs("state", replication, segment_ms), kind="state"),
        TopicSpec(terms_topic, partitions, replication,
                  topic_configs("terms", replication, segment_ms), kind="terms"),
        TopicSpec(events_topic, partitions, replication, {**durable}),
    ]
    if demo:
        wanted.append(TopicSpec(demo_topic, 1, replication, {**durable}))
    return wanted


async def ensure(connection: Connection, wanted: list[TopicSpec], seconds: float = 30.0
                 ) -> dict[str, str]:
    """Create what is missing, check what exists; `TopicMismatch` on a conflict
    (the library's `StateTopicError` for the state and terms topics)."""
    report: dict[str, str] = {}
    coordination = {spec.kind: spec for spec in wanted if spec.kind is not None}
    if coordination:
        state, terms = coordination["state"], coordination.get("terms")
        report.update(await ensure_topics(
            connection, fencing="epoch" if terms is None else "term",
            partitions=state.partitions, replication_factor=state.replication,
            segment_ms=int(state.configs["segment.ms"]), topic=state.name,
            terms_topic=None if terms is None else terms.name, time_limit=seconds))
    others = [spec for spec in wanted if spec.kind is None]
    if not others:
        return report
    admin = AIOKafkaAdminClient(bootstrap_servers=connection.bootstrap_servers,
                                request_timeout_ms=int(seconds * 1000),
                                **connection.client_options())
    await asyncio.wait_for(admin.start(), seconds)
    try:
        for spec in others:
            response = await admin.create_topics([NewTopic(
                spec.name, spec.partitions, spec.replication, topic_configs=spec.configs)])
            # aiokafka returns per-topic error codes; it raises nothing.
            (error,) = response.to_object()["topic_errors"]
            code = error["error_code"]
            if code == TopicAlreadyExistsError.errno:
                await _check(admin, spec)
                report[spec.name] = "exists"
            elif code:
                raise for_code(code)(f"creating {spec.name}: {error.get('error_message')}")
            else:
                report[spec.name] = "created"
        return report
    finally:
        await admin.close()


async def _check(admin: Any, spec: TopicSpec) -> None:
    described = await admin.describe_topics([spec.name])
    count = len(described[0]["partitions"])
    if count != spec.partitions:
        raise TopicMismatch(
            f"{spec.name} has {count} partitions, not {spec.partitions}: run every worker "
            f"with COORDINATION_PARTITIONS={count}, or delete the topic (losing its state)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    env = os.environ
    Connection.add_arguments(parser)
    parser.add_argument("--partitions", type=int,
                        default=int(env.get("COORDINATION_PARTITIONS", PARTITIONS)))
    parser.add_argument("--replication-factor", type=int,
                        default=int(env.get("COORDINATION_REPLICATION_FACTOR", "1")))
    parser.add_argument("--segment-ms", type=int, default=60_000,
                        help="state and terms topics' segment.ms: the cleaner compacts "
                             "closed segments")
    parser.add_argument("--state-topic", default=env.get("COORDINATION_STATE_TOPIC", STATE_TOPIC))
    parser.add_argument("--terms-topic", default=env.get("COORDINATION_TERMS_TOPIC", TERMS_TOPIC),
                        help="term mode's claims and heartbeats (docs/term-mode.md)")
    parser.add_argument("--events-topic",
                        default=env.get("COORDINATION_EVENTS_TOPIC", EVENTS_TOPIC))
    parser.add_argument("--demo", action="store_true", help="also the demo role's output topic")
    parser.add_argument("--demo-topic", default=env.get("COORDINATION_DEMO_TOPIC", DEMO_TOPIC))
    args = parser.parse_args(argv)
    try:
        connection = Connection.from_arguments(args)
    except ConfigurationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    wanted = specs(args.partitions, args.replication_factor, args.segment_ms, demo=args.demo,
                   state_topic=args.state_topic, terms_topic=args.terms_topic,
                   events_topic=args.events_topic, demo_topic=args.demo_topic)
    try:
        report = asyncio.run(ensure(connection, wanted))
    except KafkaUnavailableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (TopicMismatch, BrokerResponseError, CoordinationError) as exc:
        # A refusal of the cluster (an ACL missing, say) is no unreachable cluster.
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (TimeoutError, KafkaError, OSError) as exc:
        print(f"error: cannot reach {connection.bootstrap_servers}: {exc!r}", file=sys.stderr)
        return 2
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())

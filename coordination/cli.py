"""``python -m coordination``: what an operator asks of a role, as JSON.

    describe ROLE   the coordinator's current token (one DescribeTransactions)
    state ROLE      the roster, lease and skipped records read from the log
    fence ROLE      an unconditional InitProducerId: deposes the holder now

Exit status: 0 on success, 1 for an error Kafka answered (a refused topic, a
role that cannot be fenced), 2 for bad arguments or an unreachable broker.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from coordination.describe import describe_leadership, describe_role_state
from coordination.errors import StateTopicError
from coordination.kafka import KafkaTransport, KafkaUnavailableError
from coordination.partition import role_partition
from coordination.state import RoleState
from coordination.status import LeadershipStatus

__all__ = ["main"]

DEFAULT_BOOTSTRAP = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")


def _token(status: LeadershipStatus) -> dict[str, int] | None:
    if not status.authoritative(status.token):
        return None
    return {"producer_id": status.token.producer_id, "producer_epoch": status.token.producer_epoch}


def status_json(status: LeadershipStatus) -> dict[str, Any]:
    """The JSON form of a `LeadershipStatus`."""
    return {"role": status.role, "state": status.state, "token": _token(status)}


def state_json(state: RoleState, partition: int) -> dict[str, Any]:
    """The JSON form of a `RoleState`."""
    lease = state.lease
    return {
        "role": state.role,
        "partition": partition,
        "roster": [
            {"member": e.member, "rank": rank, "offset": e.offset,
             "registered_at": e.registered_at}
            for rank, e in enumerate(state.entries)
        ],
        "lease": None if lease is None else {
            "member": lease.member,
            "token": {"producer_id": lease.producer_id, "producer_epoch": lease.producer_epoch},
            "tenure": state.tenure,
            "granted_at": lease.granted_at,
            "deadline": lease.deadline,
        },
        "skipped": [{"offset": offset, "reason": reason} for offset, reason in state.errors],
        "misplaced": state.misplaced,
    }


def _parser() -> argparse.ArgumentParser:
    connection = argparse.ArgumentParser(add_help=False)
    connection.add_argument("--bootstrap-servers", default=DEFAULT_BOOTSTRAP,
                            help="Kafka bootstrap servers (default: $KAFKA_BOOTSTRAP_SERVERS "
                                 "or 127.0.0.1:9092)")
    connection.add_argument("--topic", default="__coordination_state", help="the state topic")
    parser = argparse.ArgumentParser(
        prog="python -m coordination", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    describe = commands.add_parser("describe", parents=[connection],
                                   help="the role's current token")
    describe.add_argument("role")
    state = commands.add_parser("state", parents=[connection],
                                help="the role's roster and lease from the log")
    state.add_argument("role")
    state.add_argument("--partitions", type=int, default=16,
                       help="the state topic's partition count (default 16)")
    fence = commands.add_parser("fence", parents=[connection],
                                help="depose the role's holder now")
    fence.add_argument("role")
    fence.add_argument("--transaction-timeout", type=float, default=60.0,
                       help="seconds; the fenced producer's transaction timeout (default 60)")
    return parser


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    async with KafkaTransport(args.bootstrap_servers, topic=args.topic) as transport:
        if args.command == "describe":
            return status_json(await describe_leadership(transport, args.role))
        if args.command == "state":
            state = await describe_role_state(transport, args.role, args.partitions)
            return state_json(state, role_partition(args.role, args.partitions))
        before = await describe_leadership(transport, args.role)
        token = await transport.acquire_epoch(args.role, args.transaction_timeout)
        await transport.release(args.role)
        return {
            "role": args.role,
            "fenced": _token(before),
            "token": {"producer_id": token.producer_id, "producer_epoch": token.producer_epoch},
        }


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command and print its JSON result; see the module docstring."""
    args = _parser().parse_args(argv)
    try:
        result = asyncio.run(_run(args))
    except KafkaUnavailableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (StateTopicError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2, ensure_ascii=False))
    return 0

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
import sys
from collections.abc import Sequence
from typing import Any

from coordination import defaults
from coordination.describe import describe_leadership, describe_role_state
from coordination.errors import ConfigurationError, StateTopicError
from coordination.json_forms import lease_json, roster_json, token_json
from coordination.kafka import Connection, KafkaTransport, KafkaUnavailableError
from coordination.partition import role_partition
from coordination.state import RoleState
from coordination.status import LeadershipStatus

__all__ = ["main"]

def status_json(status: LeadershipStatus) -> dict[str, Any]:
    """The JSON form of a `LeadershipStatus`."""
    current = status.token if status.authoritative(status.token) else None
    return {"role": status.role, "state": status.state, "token": token_json(current)}


def state_json(state: RoleState, partition: int) -> dict[str, Any]:
    """The JSON form of a `RoleState`."""
    return {
        "role": state.role,
        "partition": partition,
        "roster": roster_json(state),
        "lease": lease_json(state),
        "skipped": [{"offset": offset, "reason": reason} for offset, reason in state.errors],
        "misplaced": state.misplaced,
    }


def _parser() -> argparse.ArgumentParser:
    connection = argparse.ArgumentParser(add_help=False)
    Connection.add_arguments(connection)
    connection.add_argument("--topic", default=defaults.STATE_TOPIC, help="the state topic")
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
    state.add_argument("--partitions", type=int, default=defaults.PARTITIONS,
                       help="the state topic's partition count (default %(default)s)")
    fence = commands.add_parser("fence", parents=[connection],
                                help="depose the role's holder now")
    fence.add_argument("role")
    fence.add_argument("--transaction-timeout", type=float, default=60.0,
                       help="seconds; the fenced producer's transaction timeout (default 60)")
    return parser


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    connection = Connection.from_arguments(args)
    async with KafkaTransport(connection.bootstrap_servers, topic=args.topic,
                              **connection.client_options()) as transport:
        if args.command == "describe":
            return status_json(await describe_leadership(transport, args.role))
        if args.command == "state":
            state = await describe_role_state(transport, args.role, args.partitions)
            return state_json(state, role_partition(args.role, args.partitions))
        before = await describe_leadership(transport, args.role)
        token = await transport.acquire_epoch(args.role, args.transaction_timeout)
        await transport.release(args.role, token)
        return {
            "role": args.role,
            "fenced": status_json(before)["token"],
            "token": token_json(token),
        }


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command and print its JSON result; see the module docstring."""
    args = _parser().parse_args(argv)
    try:
        result = asyncio.run(_run(args))
    except (KafkaUnavailableError, ConfigurationError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (StateTopicError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2, ensure_ascii=False))
    return 0

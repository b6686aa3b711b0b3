"""``krabka`` (also ``python -m krabka``): the operator CLI.

    describe ROLE      the coordinator's current token (one DescribeTransactions)
    state ROLE         the roster, lease and skipped records read from the log
    fence ROLE         an unconditional InitProducerId: deposes the holder now
    roles              every role on the state topic: holder, token, deadline,
                       status, roster size (each partition read once)
    watch [ROLE ...]   follow the state topic and print each leadership change
                       as it is committed, until Ctrl-C or SIGTERM
    run ROLE -- COMMAND  run COMMAND only while this member leads ROLE (docs/run.md)
    elect ROLE         stand for ROLE and print each change of this member's
                       tenure; --observe prints the holder's changes instead

--fencing term (or COORDINATION_FENCING=term) reads term-mode roles: describe,
state and roles read the terms topic (--terms-topic) to its end and show each
role's highest term, its holder, and whether the holder's heartbeats are live
(its latest claim or heartbeat younger than --lease-duration, the role's
election timeout, by the record's timestamp against this machine's clock) or
it resigned; watch adds the terms topic's elected and resigned events. fence
is epoch mode's only: a term-mode holder is deposed by a higher claim.

Every command takes the worker's connection settings: the KAFKA_* variables
(KAFKA_BOOTSTRAP_SERVERS, KAFKA_SECURITY_PROTOCOL, KAFKA_SASL_*, KAFKA_SSL_*),
each overridden by its flag (--bootstrap-servers, --security-protocol ...).
None of them needs a worker running.

Output: --output table (the default on a terminal) or json (the default
otherwise, so a pipe gets JSON): one JSON document per command, and for
watch one JSON line per event, in the schema of the events topic.

Exit status: 0 on success (and for watch stopped by Ctrl-C, SIGTERM or its
reader closing the pipe, as ``watch | head -1`` does); 1
for an error Kafka answered (a refused state topic, a role that cannot be
fenced); 2 for bad arguments, bad connection settings or an unreachable
broker (also a follower's fetch failing with an outage while watching).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import Coroutine, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any, TextIO

from krabka import defaults
from krabka.cli import elect, run
from krabka.cli.output import render
from krabka.clock import SystemClock
from krabka.errors import ConfigurationError, StateTopicError
from krabka.format.partition import role_partition
from krabka.kafka import (
    Connection,
    KafkaTransport,
    KafkaTransportError,
    KafkaUnavailableError,
)
from krabka.kafka.errors import is_outage
from krabka.observe.describe import describe_leadership, describe_role_state, describe_roles
from krabka.observe.events import LeadershipEvent, describe
from krabka.observe.json_forms import (
    lease_json,
    roster_json,
    summary_json,
    term_json,
    term_summary_json,
    token_json,
)
from krabka.observe.status import LeadershipStatus, TermStatus
from krabka.observe.watch import watch_events
from krabka.options import FENCINGS, check_fencing
from krabka.rules.state import RoleState
from krabka.term.describe import describe_term_roles
from krabka.term.watch import watch_term_events

__all__ = ["DISTRIBUTION", "FENCING_VARIABLE", "PROG", "installed_version", "main",
           "output_format", "roles_json", "state_json", "status_json", "term_state_json",
           "term_status_json"]

PROG = "krabka"
DISTRIBUTION = "krabka-coordination"
OUTPUTS = ("table", "json")
FENCING_VARIABLE = "COORDINATION_FENCING"
"""The worker's setting of the fencing mode, which the CLI reads too."""


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


def term_status_json(status: TermStatus) -> dict[str, Any]:
    """The JSON form of a `TermStatus`: `term_json` with the role, partition and reading time."""
    return {"role": status.role, "fencing": "term", "partition": status.partition,
            **term_json(status), "now": status.read_at}


def term_state_json(state: RoleState, status: TermStatus) -> dict[str, Any]:
    """The JSON form of a term-mode role: its roster from the state topic, its term
    from the terms topic, and the records skipped on each."""
    return {
        "role": state.role,
        "fencing": "term",
        "partition": status.partition,
        "roster": roster_json(state),
        "term": term_json(status),
        "skipped": [{"offset": offset, "reason": reason} for offset, reason in state.errors],
        "terms_skipped": [{"offset": offset, "reason": reason}
                          for offset, reason in status.errors],
        "misplaced": state.misplaced,
        "now": status.read_at,
    }


def roles_json(states: list[RoleState], statuses: list[TermStatus], now: int) -> dict[str, Any]:
    """The JSON form of a term-mode listing: every role of either topic, by name."""
    by_state = {state.role: state for state in states}
    by_status = {status.role: status for status in statuses}
    return {"fencing": "term", "now": now, "roles": [
        term_summary_json(role, by_status.get(role), by_state.get(role))
        for role in sorted(by_state.keys() | by_status.keys())]}


def installed_version() -> str:
    """The installed distribution's version; a checkout run without installing has none."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown (not installed)"


def output_format(chosen: str | None, stdout: TextIO) -> str:
    """`chosen`, or table when `stdout` is a terminal and JSON when it is not."""
    if chosen is not None:
        return chosen
    return "table" if stdout.isatty() else "json"


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    Connection.add_arguments(common)
    common.add_argument("--topic", default=defaults.STATE_TOPIC, help="the state topic")
    common.add_argument("--output", "-o", choices=OUTPUTS, default=None,
                        help="table (the default on a terminal) or json (the default otherwise)")
    common.add_argument("--fencing", default=os.environ.get(FENCING_VARIABLE, defaults.FENCING),
                        metavar="{" + ",".join(FENCINGS) + "}",
                        help=f"the roles' fencing mode (default ${FENCING_VARIABLE}, "
                             f"else {defaults.FENCING})")
    common.add_argument("--terms-topic", default=defaults.TERMS_TOPIC,
                        help="the terms topic (term mode)")
    partitions = argparse.ArgumentParser(add_help=False)
    partitions.add_argument("--partitions", type=int, default=defaults.PARTITIONS,
                            help="the state topic's partition count (default %(default)s)")
    timeout = argparse.ArgumentParser(add_help=False)
    timeout.add_argument("--lease-duration", type=float, default=defaults.LEASE_DURATION,
                         help="seconds; in term mode the roles' election timeout, which "
                              "judges whether a holder is live (default %(default)s)")
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version",
                        version=f"{PROG} {installed_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    describe_ = commands.add_parser("describe", parents=[common, partitions, timeout],
                                    help="the role's current token")
    describe_.add_argument("role")
    state = commands.add_parser("state", parents=[common, partitions, timeout],
                                help="the role's roster and lease from the log")
    state.add_argument("role")
    fence = commands.add_parser("fence", parents=[common],
                                help="depose the role's holder now")
    fence.add_argument("role")
    fence.add_argument("--transaction-timeout", type=float, default=60.0,
                       help="seconds; the fenced producer's transaction timeout (default 60)")
    commands.add_parser("roles", parents=[common, partitions, timeout],
                        help="every role on the state topic")
    watch = commands.add_parser("watch", parents=[common, partitions],
                                help="print each leadership change as it is committed")
    watch.add_argument("roles", nargs="*", metavar="ROLE",
                       help="the roles to watch (default: every role)")
    watch.add_argument("--from-beginning", action="store_true",
                       help="print the changes already in the log first")
    run.add_parser(commands, [common, partitions])
    elect.add_parser(commands, [common, partitions])
    return parser


async def _answer(transport: KafkaTransport, args: argparse.Namespace) -> dict[str, Any]:
    """The JSON answer of a one-shot command."""
    if args.fencing == "term":
        return await _term_answer(transport, args)
    if args.command == "describe":
        return status_json(await describe_leadership(transport, args.role))
    if args.command == "state":
        state = await describe_role_state(transport, args.role, args.partitions)
        return state_json(state, role_partition(args.role, args.partitions))
    if args.command == "roles":
        states = await describe_roles(transport, args.partitions)
        now = SystemClock().now_ms()
        return {"roles": [summary_json(state, now) for state in states], "now": now}
    before = await describe_leadership(transport, args.role)
    token = await transport.acquire_epoch(args.role, args.transaction_timeout)
    await transport.release(args.role, token)
    return {"role": args.role, "fenced": status_json(before)["token"], "token": token_json(token)}


async def _term_answer(transport: KafkaTransport, args: argparse.Namespace) -> dict[str, Any]:
    """The JSON answer of describe, state or roles for term-mode roles."""
    clock = SystemClock()
    if args.command == "roles":
        states = await describe_roles(transport, args.partitions)
        statuses = await describe_term_roles(transport, args.partitions,
                                             election_timeout=args.lease_duration, clock=clock)
        return roles_json(states, statuses, clock.now_ms())
    status = await describe_leadership(transport, args.role, fencing="term",
                                       partitions=args.partitions,
                                       election_timeout=args.lease_duration, clock=clock)
    if args.command == "describe":
        return term_status_json(status)
    return term_state_json(await describe_role_state(transport, args.role, args.partitions),
                           status)


async def _watch(transport: KafkaTransport, args: argparse.Namespace, table: bool) -> None:
    """Follow the events until SIGINT or SIGTERM, then return."""
    def emit(event: LeadershipEvent) -> None:
        body = event.to_json()
        # Flushed per line: a pipe would otherwise hold events back for minutes.
        print(describe(body) if table else json.dumps(body, ensure_ascii=False), flush=True)

    term = args.fencing == "term"
    topics = f"{args.topic} and {args.terms_topic}" if term else args.topic
    caught_up = 0

    def following() -> None:
        # In term mode two watches catch up, each calling this once.
        nonlocal caught_up
        caught_up += 1
        if caught_up < (2 if term else 1):
            return
        which = ", ".join(args.roles) if args.roles else "every role"
        print(f"following {topics} ({which}); Ctrl-C to stop", file=sys.stderr, flush=True)

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    watches = [watch_events(transport, args.partitions, emit, roles=args.roles,
                            from_beginning=args.from_beginning, following=following)]
    if term:
        watches.append(watch_term_events(transport, args.partitions, emit, roles=args.roles,
                                         from_beginning=args.from_beginning,
                                         following=following))
    watching = asyncio.ensure_future(_until_one_ends(watches))
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait([watching, stopping], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        stopping.cancel()
        watching.cancel()
        # The follower's tails close before the transport does; an error
        # that ended the watch is raised here.
        with contextlib.suppress(asyncio.CancelledError):
            await watching


async def _until_one_ends(watches: list[Coroutine[Any, Any, None]]) -> None:
    """Run `watches` until one ends (they end only by raising); then stop the others.

    Not a TaskGroup: it would wrap the error in an ExceptionGroup, and the
    exit status is chosen by the error's own type.
    """
    tasks = [asyncio.ensure_future(watch) for watch in watches]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _run(args: argparse.Namespace, table: bool) -> None:
    connection = Connection.from_arguments(args)
    async with KafkaTransport(connection.bootstrap_servers, topic=args.topic,
                              terms_topic=args.terms_topic,
                              **connection.client_options()) as transport:
        if args.command == "watch":
            await _watch(transport, args, table)
            return
        body = await _answer(transport, args)
    print(render(args.command, body) if table else json.dumps(body, indent=2,
                                                               ensure_ascii=False))


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command and print its result; see the module docstring."""
    parser = _parser()
    argv, command = run.split_command(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    try:
        args.fencing = check_fencing(args.fencing)
    except ValueError as exc:
        parser.error(f"--fencing (or ${FENCING_VARIABLE}): {exc}")
    if args.command == "fence" and args.fencing == "term":
        parser.error("fence deposes an epoch-mode holder with InitProducerId; a term-mode "
                     "holder is deposed by a claim of a higher term, which this CLI does not "
                     f"make (drop --fencing term, or ${FENCING_VARIABLE})")
    if args.command == run.COMMAND:
        return run.main(args, command)
    if args.command == elect.COMMAND:
        return elect.main(args, table=output_format(args.output, sys.stdout) == "table")
    try:
        asyncio.run(_run(args, table=output_format(args.output, sys.stdout) == "table"))
    except ConfigurationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KafkaTransportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2 if _unreachable(exc) else 1
    except (StateTopicError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader of stdout went away (``watch | head -1``): an end like
        # Ctrl-C. stdout then points nowhere, so the flush at exit cannot
        # fail again (the advice of Python's signal module documentation).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return 0


def _unreachable(exc: KafkaTransportError) -> bool:
    """Whether the broker could not be reached (or was lost), not an error it answered."""
    return isinstance(exc, KafkaUnavailableError) or (
        exc.__cause__ is not None and is_outage(exc.__cause__))

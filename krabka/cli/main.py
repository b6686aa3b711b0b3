"""The operator CLI, ``krabka`` (also ``python -m krabka``).

Its help text is `DESCRIPTION` and `EPILOG`, plain text because argparse
prints them as they are. Each command is a subparser built from the shared
parent parsers of `Parents` (the connection flags with ``--timeout`` and
``--verbose``, the topic flags, the output choice) and names the coroutine
that runs it (`Command`); `main` checks every argument before any network
call, bounds a one-shot command by its ``--timeout``, keeps aiokafka's log
records off stderr unless ``--verbose``, and turns each error into one line
and an exit status.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from krabka import defaults
from krabka.cli import elect, run
from krabka.cli.output import render
from krabka.clock import SystemClock
from krabka.errors import ConfigurationError, CoordinationError
from krabka.format.partition import role_partition
from krabka.kafka import (
    Connection,
    KafkaTransport,
    KafkaTransportError,
    KafkaUnavailableError,
    ensure_topics,
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
from krabka.runtime.cancellation import bounded, until_one_ends
from krabka.runtime.versions import installed_version
from krabka.term.describe import describe_term_roles
from krabka.term.watch import watch_term_events

__all__ = ["DEFAULT_TIMEOUT", "DESCRIPTION", "EPILOG", "FENCING_VARIABLE",
           "PROG", "Command", "Parents", "main", "output_format",
           "parents", "roles_json", "state_json", "status_json", "term_state_json",
           "term_status_json"]

PROG = "krabka"
OUTPUTS = ("table", "json")
FENCING_VARIABLE = "COORDINATION_FENCING"
"""The worker's setting of the fencing mode, which the CLI reads too."""
DEFAULT_TIMEOUT = 30.0
"""Seconds a one-shot command may take, unless --timeout says otherwise."""
QUIET_LOGGERS = ("aiokafka",)
"""Loggers whose records stay off stderr unless --verbose: the CLI reports the
error they are about itself, in one line."""

DESCRIPTION = """Look at and act on the roles of a krabka coordination group, from any machine
that can reach its Kafka cluster. No worker needs to be running.

commands:
  describe ROLE      the role's current token (one DescribeTransactions)
  state ROLE         the role's roster, lease and skipped records from the log
  fence ROLE         an unconditional InitProducerId: deposes the role's holder now
  roles              every role on the state topic: holder, token, deadline,
                     status, roster size (each partition read once)
  watch [ROLE ...]   follow the state topic and print each leadership change as
                     it is committed, until Ctrl-C or SIGTERM
  create-topics      create the state topic (and with --fencing term the terms
                     topic) as the members' start-up check wants it; an existing
                     topic is checked, not changed
  run ROLE -- COMMAND  run COMMAND only while this member leads ROLE
  elect ROLE         stand for ROLE and print each change of this member's
                     tenure; --observe prints the holder's changes instead

With --fencing term (or COORDINATION_FENCING=term), describe, state and roles
read the terms topic (--terms-topic) to its end and show each role's highest
term, its holder, and whether the holder's heartbeats are live (its latest
claim or heartbeat younger than --lease-duration, the role's election timeout,
by the record's timestamp against this machine's clock) or it resigned; watch
adds the terms topic's elected and resigned events. fence is epoch mode's
only: a term-mode holder is deposed by a higher claim.

Every command takes the worker's connection settings: the KAFKA_* variables
(KAFKA_BOOTSTRAP_SERVERS, KAFKA_SECURITY_PROTOCOL, KAFKA_SASL_*, KAFKA_SSL_*),
each overridden by its flag (--bootstrap-servers, --security-protocol ...),
and --timeout SECONDS (default 30): a one-shot command that has not finished
by then stops with exit status 2; for watch, run and elect it bounds each
request. aiokafka's
own log lines are shown only with --verbose (-v; -vv for debug).

Output: --output table (the default on a terminal) or json (the default
otherwise, so a pipe gets JSON): one JSON document per command, and for watch
one JSON line per event, in the schema of the events topic.
"""

EPILOG = """exit status:
  0  success (and for watch stopped by Ctrl-C, SIGTERM or its reader closing
     the pipe, as watch | head -1 does)
  1  an error the cluster answered: a refused state or terms topic, a missing
     ACL, a role that cannot be fenced
  2  bad arguments or connection settings (found before any connection), an
     unreachable cluster, one that did not answer within --timeout, or a
     follower's fetch failing with an outage while watching
"""


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


def output_format(chosen: str | None, stdout: TextIO) -> str:
    """`chosen`, or table when `stdout` is a terminal and JSON when it is not."""
    if chosen is not None:
        return chosen
    return "table" if stdout.isatty() else "json"


Command = Callable[[argparse.Namespace, bool], Awaitable[None]]
"""What runs a command: its parsed arguments and whether to print tables (else JSON)."""


@dataclass(frozen=True)
class Parents:
    """The parent parsers commands share; a command takes the ones it needs.

    `cluster` is every command that talks to the cluster: the connection
    flags, ``--timeout`` and ``--verbose``. `topics` names the state and
    terms topics and the fencing mode, `partitions` the partition count,
    `output` the choice of table or JSON, `judging` the election timeout a
    term-mode holder is judged by.
    """

    cluster: argparse.ArgumentParser
    topics: argparse.ArgumentParser
    partitions: argparse.ArgumentParser
    output: argparse.ArgumentParser
    judging: argparse.ArgumentParser


def _at_least_one(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def _seconds(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {value!r}") from None
    # `not >` also refuses NaN; infinity would be no bound at all.
    if not 0 < number < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {value}")
    return number


def _role(value: str) -> str:
    if not value:
        raise argparse.ArgumentTypeError("must not be empty (no record names an empty role)")
    return value


def _fencing(value: str) -> str:
    try:
        return check_fencing(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be one of {', '.join(FENCINGS)}, got {value!r}") from None


def parents() -> Parents:
    """Fresh parent parsers (argparse copies a parent's arguments into each child)."""
    cluster = argparse.ArgumentParser(add_help=False)
    Connection.add_arguments(cluster)
    cluster.add_argument("--timeout", type=_seconds, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                         help="the deadline of the whole command; for watch, of each "
                              "request (default %(default)g)")
    cluster.add_argument("--verbose", "-v", action="count", default=0,
                         help="show the Kafka client's own log lines (-vv: debug too)")
    topics = argparse.ArgumentParser(add_help=False)
    topics.add_argument("--topic", default=defaults.STATE_TOPIC,
                        help="the state topic (default %(default)s)")
    topics.add_argument("--terms-topic", default=defaults.TERMS_TOPIC,
                        help="the terms topic of term mode (default %(default)s)")
    topics.add_argument("--fencing", type=_fencing, default=None,
                        metavar="{" + ",".join(FENCINGS) + "}",
                        help=f"the roles' fencing mode (default ${FENCING_VARIABLE}, "
                             f"else {defaults.FENCING})")
    partitions = argparse.ArgumentParser(add_help=False)
    partitions.add_argument("--partitions", type=_at_least_one, default=defaults.PARTITIONS,
                            help="the state topic's partition count (default %(default)s)")
    output = argparse.ArgumentParser(add_help=False)
    output.add_argument("--output", "-o", choices=OUTPUTS, default=None,
                        help="table (the default on a terminal) or json (the default otherwise)")
    judging = argparse.ArgumentParser(add_help=False)
    judging.add_argument("--lease-duration", type=_seconds, default=defaults.LEASE_DURATION,
                         help="seconds; in term mode the roles' election timeout, which "
                              "judges whether a holder is live (default %(default)s)")
    return Parents(cluster, topics, partitions, output, judging)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version",
                        version=f"{PROG} {installed_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    shared = parents()
    reading = [shared.cluster, shared.topics, shared.partitions, shared.output]

    def command(name: str, runs: Command, help_: str,
                chosen: Sequence[argparse.ArgumentParser], *,
                one_shot: bool = True) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, parents=list(chosen), help=help_, description=help_)
        sub.set_defaults(run=runs, one_shot=one_shot)
        return sub

    describe_ = command("describe", _one_shot, "the role's current token",
                        [*reading, shared.judging])
    describe_.add_argument("role", type=_role)
    state = command("state", _one_shot, "the role's roster and lease from the log",
                    [*reading, shared.judging])
    state.add_argument("role", type=_role)
    fence = command("fence", _one_shot, "depose the role's holder now",
                    [shared.cluster, shared.topics, shared.output])
    fence.add_argument("role", type=_role)
    fence.add_argument("--transaction-timeout", type=_seconds, default=60.0,
                       help="seconds; the fenced producer's transaction timeout (default 60)")
    command("roles", _one_shot, "every role on the state topic", [*reading, shared.judging])
    watch = command("watch", _follow, "print each leadership change as it is committed",
                    reading, one_shot=False)
    watch.add_argument("roles", nargs="*", metavar="ROLE", type=_role,
                       help="the roles to watch (default: every role)")
    watch.add_argument("--from-beginning", action="store_true",
                       help="print the changes already in the log first")
    create = command("create-topics", _create_topics,
                     "create the state topic, and with --fencing term the terms topic, "
                     "as the members' start-up check wants them", reading)
    create.add_argument("--replication-factor", type=_at_least_one, default=None,
                        help="replicas of each partition (default 3, or the number of "
                             "brokers if fewer)")
    run.add_parser(commands, [shared.cluster, shared.topics, shared.partitions])
    elect.add_parser(commands, [shared.cluster, shared.topics, shared.partitions, shared.output])
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
    watching = asyncio.ensure_future(until_one_ends(watches))
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



def _transport(args: argparse.Namespace) -> KafkaTransport:
    connection: Connection = args.connection
    return KafkaTransport(connection.bootstrap_servers, topic=args.topic,
                          terms_topic=args.terms_topic, operation_timeout=args.timeout,
                          **connection.client_options())


def _print(args: argparse.Namespace, body: dict[str, Any], table: bool) -> None:
    print(render(args.command, body) if table else json.dumps(body, indent=2,
                                                               ensure_ascii=False))


async def _one_shot(args: argparse.Namespace, table: bool) -> None:
    """describe, state, fence and roles: one answer, printed."""
    async with _transport(args) as transport:
        body = await _answer(transport, args)
    _print(args, body, table)


async def _follow(args: argparse.Namespace, table: bool) -> None:
    """watch: print events until SIGINT or SIGTERM."""
    async with _transport(args) as transport:
        await _watch(transport, args, table)


async def _create_topics(args: argparse.Namespace, table: bool) -> None:
    """create-topics: create what is missing, check what exists, print what was done."""
    done = await ensure_topics(args.connection, fencing=args.fencing,
                               partitions=args.partitions,
                               replication_factor=args.replication_factor, topic=args.topic,
                               terms_topic=args.terms_topic, time_limit=args.timeout)
    _print(args, {"topics": [{"topic": name, "outcome": outcome}
                             for name, outcome in done.items()]}, table)


async def _within_deadline(args: argparse.Namespace, table: bool) -> None:
    """The command, bounded by --timeout if it is a one-shot command."""
    runs: Command = args.run
    if not args.one_shot:
        await runs(args, table)
        return
    try:
        await bounded(runs(args, table), args.timeout)
    except TimeoutError:
        raise KafkaUnavailableError(
            f"{args.command}: no answer from the Kafka cluster at "
            f"{args.connection.bootstrap_servers} within --timeout {args.timeout:g} s"
        ) from None


def _checked(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The arguments argparse cannot check alone; a usage error (exit 2) if one is wrong."""
    if args.fencing is None:
        raw = os.environ.get(FENCING_VARIABLE) or defaults.FENCING
        try:
            args.fencing = check_fencing(raw)
        except ValueError as exc:
            parser.error(f"${FENCING_VARIABLE}: {exc}")
    if args.command == "fence" and args.fencing == "term":
        parser.error("fence deposes an epoch-mode holder with InitProducerId; a term-mode "
                     "holder is deposed by a claim of a higher term, which this CLI does not "
                     f"make (drop --fencing term, or ${FENCING_VARIABLE})")


@contextlib.contextmanager
def _logging(verbose: int) -> Iterator[None]:
    """Log records to stderr while a command runs: warnings and worse, and with
    `verbose` information (or debug) and the aiokafka client's too.

    The client logs every failed connection attempt, with tracebacks; the
    command reports the error that ends it in one line, so those records
    would only repeat it. Undone at the end: `main` can be called in-process.
    """
    handler = logging.StreamHandler(sys.stderr)
    if verbose:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: "
                                               "%(message)s"))
    else:
        handler.setFormatter(logging.Formatter(f"{PROG}: %(levelname)s: %(message)s"))
        handler.addFilter(lambda record: not record.name.startswith(QUIET_LOGGERS))
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.WARNING if not verbose else
                  logging.INFO if verbose == 1 else logging.DEBUG)
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def _error(message: object) -> None:
    """The command's error as one line on stderr."""
    print(f"{PROG}: error: " + " ".join(str(message).split()), file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command and print its result (see `DESCRIPTION` and `EPILOG`)."""
    parser = _parser()
    argv, command = run.split_command(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    _checked(parser, args)
    try:
        args.connection = Connection.from_arguments(args)
    except ConfigurationError as exc:
        _error(exc)
        return 2
    if args.command in (run.COMMAND, elect.COMMAND):
        # Long-running: their own exit statuses (docs/run.md), each request
        # bounded by --timeout.
        with _logging(args.verbose):
            if args.command == run.COMMAND:
                return run.main(args, command)
            return elect.main(args, table=output_format(args.output, sys.stdout) == "table")
    try:
        with _logging(args.verbose):
            asyncio.run(_within_deadline(
                args, table=output_format(args.output, sys.stdout) == "table"))
    except ConfigurationError as exc:
        _error(exc)
        return 2
    except KafkaTransportError as exc:
        _error(exc)
        return 2 if _unreachable(exc) else 1
    except (CoordinationError, ValueError) as exc:
        # StateTopicError, AccessDeniedError, FencedError ...: the cluster's answer.
        _error(exc)
        return 1
    except BrokenPipeError:
        # The reader of stdout went away (watch | head -1): an end like Ctrl-C.
        # stdout then points nowhere, so the flush at exit cannot fail again
        # (the advice of Python's signal module documentation).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return 0


def _unreachable(exc: KafkaTransportError) -> bool:
    """Whether the broker could not be reached (or was lost), not an error it answered."""
    return isinstance(exc, KafkaUnavailableError) or (
        exc.__cause__ is not None and is_outage(exc.__cause__))

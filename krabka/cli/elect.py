"""``krabka elect ROLE``: stand for a role and print each change of this member's tenure.

It campaigns with `LeaderRunner` (its function only waits: the tenure is
the point) and prints one line when this member is elected and one when
its tenure ends, until SIGINT or SIGTERM; then it resigns (and leaves the
roster) and exits 0. ``krabka elect --observe ROLE`` stands for nothing:
it follows the role's records (`krabka.observe.watch`, and in term mode
`krabka.term.watch` too) and prints the holder at each change.

Lines are JSON on a pipe and readable text on a terminal, as ``--output``
chooses for the CLI's other commands.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import Awaitable
from typing import Any

from krabka.cli.campaign import (
    Subcommands,
    add_campaign_arguments,
    campaign_member,
    campaign_options,
)
from krabka.cli.output import EMPTY, timestamp_text, token_text
from krabka.clock import SystemClock
from krabka.errors import ConfigurationError, CoordinationError
from krabka.kafka import Connection, KafkaTransport
from krabka.observe.events import LeadershipEvent
from krabka.observe.json_forms import token_json
from krabka.observe.watch import watch_events
from krabka.runner import LeaderRunner, RunnerObserver, TenureStop
from krabka.runtime.cancellation import until_one_ends
from krabka.tenure import Leadership
from krabka.term.watch import watch_term_events

__all__ = ["COMMAND", "HOLDER_KINDS", "add_parser", "holder_json", "holder_text", "main",
           "tenure_json", "tenure_text"]

COMMAND = "elect"

HOLDER_KINDS = frozenset({"elected", "resigned"})
"""The events that change a role's holder; a watcher keeps no clock, so a
lapse shows as the successor's ``elected``."""


def tenure_json(event: str, leadership: Leadership, stop: TenureStop | None = None
                ) -> dict[str, Any]:
    """The JSON line of a change of this member's tenure (`event`: elected or lost)."""
    body: dict[str, Any] = {
        "event": event, "role": leadership.role, "member": leadership.member,
        "fencing": leadership.options.fencing, "token": token_json(leadership.token),
        "tenure": leadership.tenure, "fence_deadline": leadership.fence_deadline,
        "at": SystemClock().now_ms()}
    if stop is not None:
        body.update(reason=stop.reason, error=stop.error, at=stop.at)
    return body


def tenure_text(body: dict[str, Any]) -> str:
    """A `tenure_json` line for a terminal."""
    token = token_text(body["token"])
    if body["event"] == "elected":
        text = (f"{body['member']} leads {body['role']!r} ({token}, fence deadline "
                f"{timestamp_text(body['fence_deadline'])})")
    else:
        text = f"{body['member']} no longer leads {body['role']!r} ({token}): {body['reason']}"
        if body.get("error"):
            text += f" ({body['error']})"
    return f"{timestamp_text(body['at'])} {text}"


def holder_json(event: LeadershipEvent) -> dict[str, Any]:
    """The JSON line of a change of holder: the holder after it (None: vacant)."""
    body = event.to_json()
    holder = body["member"] if body["kind"] == "elected" else None
    return {"role": body["role"], "holder": holder,
            "token": body["token"] if holder is not None else None,
            "kind": body["kind"], "member": body["member"], "timestamp": body["timestamp"]}


def holder_text(body: dict[str, Any]) -> str:
    """A `holder_json` line for a terminal."""
    if body["holder"] is None:
        text = f"{body['role']!r} is vacant ({body['member'] or EMPTY} {body['kind']})"
    else:
        text = f"{body['role']!r} is held by {body['holder']} ({token_text(body['token'])})"
    return f"{timestamp_text(body['timestamp'])} {text}"


def _printer(table: bool, text: Any) -> Any:
    def emit(body: dict[str, Any]) -> None:
        # Flushed per line: a pipe would otherwise hold the lines back.
        print(text(body) if table else json.dumps(body, ensure_ascii=False), flush=True)
    return emit


class _Tenures(RunnerObserver):
    def __init__(self, table: bool) -> None:
        self.emit = _printer(table, tenure_text)

    def elected(self, role: str, leadership: Leadership) -> None:
        self.emit(tenure_json("elected", leadership))

    def lost(self, role: str, leadership: Leadership, stop: TenureStop) -> None:
        self.emit(tenure_json("lost", leadership, stop))


async def _hold(leadership: Leadership) -> None:
    """The runner's function: nothing to do but hold the role until cancelled."""
    await asyncio.Event().wait()


def add_parser(commands: Subcommands,
               parents: list[argparse.ArgumentParser]) -> None:
    """Register ``elect`` among `commands`, with the connection flags of `parents`."""
    elect = commands.add_parser(
        COMMAND, parents=parents, help="stand for ROLE and print each change of this "
                                       "member's tenure (or, with --observe, of the holder)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_campaign_arguments(elect)
    elect.add_argument("--observe", action="store_true",
                       help="do not stand: print the role's holder at each change")


async def _until_signalled(work: Awaitable[None]) -> None:
    """Wait for `work` until SIGINT or SIGTERM (or until it ends, raising its
    error); then cancel it."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    working = asyncio.ensure_future(work)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({working, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        stopping.cancel()
        working.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await working


async def _stand(transport: KafkaTransport, args: argparse.Namespace, member: str,
                 table: bool) -> None:
    runner = LeaderRunner(transport, args.role, member, _hold, options=campaign_options(args),
                          observer=_Tenures(table))
    print(f"{member} stands for {args.role!r}; Ctrl-C to resign and stop", file=sys.stderr,
          flush=True)
    try:
        # Shielded: a signal stops the runner in its order (function, resignation,
        # deregistration) rather than cancelling its task.
        await _until_signalled(asyncio.shield(runner.start()))
    finally:
        await runner.stop()


async def _observe(transport: KafkaTransport, args: argparse.Namespace, table: bool) -> None:
    emit = _printer(table, holder_text)
    term = args.fencing == "term"
    caught_up = 0

    def report(event: LeadershipEvent) -> None:
        if event.kind in HOLDER_KINDS:
            emit(holder_json(event))

    def following() -> None:
        nonlocal caught_up
        caught_up += 1
        if caught_up == (2 if term else 1):
            print(f"observing {args.role!r}; Ctrl-C to stop", file=sys.stderr, flush=True)

    watches = [watch_events(transport, args.partitions, report, roles=[args.role],
                            following=following)]
    if term:
        watches.append(watch_term_events(transport, args.partitions, report,
                                         roles=[args.role], following=following))
    await _until_signalled(until_one_ends(watches))



async def _elect(args: argparse.Namespace, member: str, table: bool) -> None:
    connection = Connection.from_arguments(args)
    async with KafkaTransport(connection.bootstrap_servers, topic=args.topic,
                              terms_topic=args.terms_topic,
                              operation_timeout=args.timeout,
                              **connection.client_options()) as transport:
        if args.observe:
            await _observe(transport, args, table)
        else:
            await _stand(transport, args, member, table)


def main(args: argparse.Namespace, *, table: bool) -> int:
    """Run ``krabka elect``: 0 once stopped by SIGINT or SIGTERM, 2 for bad
    arguments or settings, 1 for an error of the cluster."""
    try:
        member = campaign_member(args)
        campaign_options(args)
    except ValueError as exc:
        print(f"krabka elect: error: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(_elect(args, member, table))
    except ConfigurationError as exc:
        print(f"krabka elect: error: {exc}", file=sys.stderr)
        return 2
    except CoordinationError as exc:
        print(f"krabka elect: error: {exc}", file=sys.stderr)
        return 1
    return 0

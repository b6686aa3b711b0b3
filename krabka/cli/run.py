"""``krabka run ROLE [options] -- COMMAND [ARGS...]``: any program as a singleton.

Campaigns for ROLE with `LeaderRunner` and runs COMMAND as a child process
only while this member leads (docs/run.md). The runner's function is where
the child lives: it starts the child once the tenure is ready, and when the
runner cancels it (a step-down, a lost tenure, a stop) it stops the child's
process group, SIGTERM then SIGKILL, and returns only once the child is
reaped; the runner resigns after its function has ended, so a successor's
child never starts while this one lives (`krabka.cli.child`).

The kill time is ``min(stop + grace, fence deadline - kill ahead)``: never
after the fence deadline. While the child runs, a tenure whose renewals
stop coming would reach its fence deadline with the child still running,
so the child is stopped, and the role resigned, once the deadline is
within ``grace + kill ahead``; a leader renewing on time never gets that
close (`check_grace`).
"""

from __future__ import annotations

import argparse
import asyncio
import enum
import logging
import math
import os
import random
import shutil
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from krabka.cli.campaign import (
    Subcommands,
    add_campaign_arguments,
    campaign_member,
    campaign_options,
)
from krabka.cli.child import Child, exit_status
from krabka.cli.health_server import HealthServer
from krabka.clock import Clock, SystemClock
from krabka.errors import ConfigurationError, CoordinationError
from krabka.format.token import FencingToken, TermToken
from krabka.health import LeadershipHealth
from krabka.kafka import Connection, KafkaTransport
from krabka.options import LeadershipOptions
from krabka.runner import MAX_BACKOFF, LeaderRunner, RunnerObserver, TenureStop, backoff_delay
from krabka.runtime.cancellation import through_cancellation
from krabka.tenure import Leadership

__all__ = ["COMMAND", "EXIT_CLUSTER", "EXIT_NOT_EXECUTABLE", "EXIT_NOT_FOUND", "EXIT_USAGE",
           "KILL_AHEAD_MS", "OnExit", "Singleton", "add_parser", "check_grace", "default_grace",
           "kill_ahead_ms", "main", "split_command", "tenure_environment"]

log = logging.getLogger("krabka.cli.run")

COMMAND = "run"

EXIT_CLUSTER = 1
"""An error of the cluster or the library stopped ``krabka run``."""
EXIT_USAGE = 2
"""Bad arguments or connection settings."""
EXIT_NOT_EXECUTABLE = 126
"""COMMAND exists but cannot be executed (the shell's status)."""
EXIT_NOT_FOUND = 127
"""COMMAND was not found (the shell's status)."""

KILL_AHEAD_MS = 200
"""How long before the fence deadline the child's group is SIGKILLed at the
latest (less for a short lease, `kill_ahead_ms`): time for the kernel to end
it and for this process to reap it while the tenure still holds."""

MAX_GRACE = 2.0
"""The longest default grace, in seconds."""

STOP_SLACK = 5.0
"""Seconds the runner waits for the function beyond the grace: reaping a
SIGKILLed child takes far less; only a child stuck in the kernel takes more."""


class OnExit(enum.Enum):
    """What ``krabka run`` does when the child exits by itself while leading."""

    RESIGN = "resign"
    """Resign, and campaign again after the runner's back-off."""
    RESTART = "restart"
    """Start it again while still leading (backing off if it keeps exiting at once)."""
    EXIT = "exit"
    """Resign and end ``krabka run`` with the child's status."""


def kill_ahead_ms(options: LeadershipOptions) -> int:
    """How long before the fence deadline the group is SIGKILLed at the latest."""
    return min(KILL_AHEAD_MS, options.margin_ms // 4)


def default_grace(options: LeadershipOptions) -> float:
    """Seconds between SIGTERM and SIGKILL unless ``--grace`` says: min(2 s, margin / 2)."""
    return min(MAX_GRACE, options.fence_margin / 2)


def check_grace(grace: float, options: LeadershipOptions) -> None:
    """Refuse a grace a leader renewing on time could not always give.

    A tenure renewed on time keeps at least ``lease - margin - renew`` before
    its fence deadline; the child is stopped once the deadline is within
    ``grace + kill ahead``, so that sum must stay below it.
    """
    if grace < 0:
        raise ValueError(f"--grace must not be negative, got {grace}")
    room = options.lease_duration - options.fence_margin - options.renew_interval
    need = grace + kill_ahead_ms(options) / 1000
    if not need < room:
        raise ValueError(
            f"--grace ({grace} s) plus the kill's lead ({kill_ahead_ms(options)} ms) must be "
            f"shorter than lease - fence margin - renew interval ({room:.3f} s), the time "
            f"a leader renewing on time always has before its fence deadline; shorten "
            f"--grace or --renew-interval, or lengthen --lease-duration")


def tenure_environment(leadership: Leadership, clock: Clock) -> dict[str, str]:
    """The variables that carry a tenure into the child's environment (docs/run.md)."""
    env = {
        "KRABKA_ROLE": leadership.role,
        "KRABKA_MEMBER": leadership.member,
        "KRABKA_FENCING": leadership.options.fencing,
        "KRABKA_TENURE": str(leadership.tenure),
        "KRABKA_FENCE_REMAINING_MS": str(max(
            0, leadership.fence_deadline_monotonic - clock.monotonic_ms())),
        "KRABKA_FENCE_DEADLINE_MS": str(leadership.fence_deadline),
    }
    token = leadership.token
    if isinstance(token, TermToken):
        env["KRABKA_TOKEN"] = str(token.term)
        env["KRABKA_TERM"] = str(token.term)
    elif isinstance(token, FencingToken):
        env["KRABKA_TOKEN"] = f"{token.producer_id}:{token.producer_epoch}"
        env["KRABKA_PRODUCER_ID"] = str(token.producer_id)
        env["KRABKA_PRODUCER_EPOCH"] = str(token.producer_epoch)
    return env


@dataclass(frozen=True, slots=True)
class RunSettings:
    """What ``krabka run`` was asked to do, checked."""

    role: str
    member: str
    command: tuple[str, ...]
    options: LeadershipOptions
    grace: float
    on_exit: OnExit
    health: HealthEndpoint | None = None


@dataclass(frozen=True, slots=True)
class HealthEndpoint:
    """Where ``--health-port`` serves liveness, and its tolerance in seconds."""

    host: str
    port: int
    tolerance: float


class Singleton:
    """The runner's function: the child, started and stopped with the tenure.

    `status` is set when ``krabka run`` is to end on its own (the child
    exited with ``--on-exit exit``, or could not be executed), and
    `finished` is then set.
    """

    def __init__(self, settings: RunSettings, clock: Clock) -> None:
        self.settings = settings
        self.clock = clock
        self.status: int | None = None
        self.finished = asyncio.Event()
        self._rng = random.Random(f"{settings.role}\x00{settings.member}")

    async def lead(self, leadership: Leadership) -> None:
        """Run the child while `leadership` lasts; see the module docstring."""
        quick_exits = 0
        while True:
            started = self.clock.monotonic_ms()
            code = await self._run_once(leadership)
            if code is None:
                return
            if self.settings.on_exit is OnExit.EXIT:
                self._finish(exit_status(code))
                return
            if self.settings.on_exit is OnExit.RESIGN:
                log.warning("%s: the command exited (status %d); resigning", leadership.role,
                            exit_status(code))
                return
            quick = self.clock.monotonic_ms() - started < leadership.options.lease_ms
            quick_exits = quick_exits + 1 if quick else 0
            if quick_exits:
                delay = backoff_delay(quick_exits, 1.0, MAX_BACKOFF, self._rng)
                await self.clock.sleep_until_monotonic(
                    self.clock.monotonic_ms() + round(delay * 1000))
            if leadership.fenced():
                return

    async def _run_once(self, leadership: Leadership) -> int | None:
        """Start the child and supervise it: its return code if it exited by
        itself, None if it was stopped because the tenure is at risk or
        could not be started."""
        stopping_at = self.clock.monotonic_ms()
        ahead = kill_ahead_ms(leadership.options)
        grace_ms = round(self.settings.grace * 1000)

        def kill_at() -> int:
            return min(stopping_at + grace_ms, leadership.fence_deadline_monotonic - ahead)

        starting = asyncio.ensure_future(Child.start(self.settings.command, {
            **os.environ, **tenure_environment(leadership, self.clock)}, self.clock))
        try:
            child = await through_cancellation(starting)
        except asyncio.CancelledError:
            # Cancelled while it was being started: a child that did start
            # is stopped like any other before the cancellation goes on.
            if not starting.cancelled() and starting.exception() is None:
                stopping_at = self.clock.monotonic_ms()
                await through_cancellation(asyncio.ensure_future(
                    starting.result().stop(kill_at)))
            raise
        except PermissionError as exc:
            log.error("%s: cannot execute the command: %s", leadership.role, exc)
            self._finish(EXIT_NOT_EXECUTABLE)
            return None
        except FileNotFoundError as exc:
            log.error("%s: the command was not found: %s", leadership.role, exc)
            self._finish(EXIT_NOT_FOUND)
            return None
        try:
            at_risk = await self._supervise(child, leadership, grace_ms + ahead)
        except BaseException:
            # The runner cancelled the function: the tenure is over or being
            # handed over. The child's group is ended before the cancellation
            # goes on, so the runner resigns only once the child is reaped.
            stopping_at = self.clock.monotonic_ms()
            await through_cancellation(asyncio.ensure_future(child.stop(kill_at)))
            raise
        stopping_at = self.clock.monotonic_ms()
        code = await through_cancellation(asyncio.ensure_future(child.stop(kill_at)))
        if at_risk:
            log.warning("%s: %s has had no renewal counted for too long: its fence deadline "
                        "is %d ms away; the command is stopped and the role resigned",
                        leadership.role, leadership.member,
                        leadership.fence_deadline_monotonic - self.clock.monotonic_ms())
            return None
        return code

    async def _supervise(self, child: Child, leadership: Leadership, lead_ms: int) -> bool:
        """Wait until the child exits (False) or the fence deadline is within
        `lead_ms` (True). The deadline moves later with each renewal, so it
        is read again whenever the wait wakes."""
        exited: asyncio.Future[Any] = child.exited
        while True:
            at = leadership.fence_deadline_monotonic - lead_ms
            if self.clock.monotonic_ms() >= at:
                return True
            timer = asyncio.ensure_future(self.clock.sleep_until_monotonic(at))
            try:
                await asyncio.wait({exited, timer}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                timer.cancel()
            if exited.done():
                return False

    def _finish(self, status: int) -> None:
        self.status = status
        self.finished.set()


class _Report(RunnerObserver):
    """One line on stderr per change of this member's tenure."""

    def __init__(self, settings: RunSettings) -> None:
        self.settings = settings

    def elected(self, role: str, leadership: Leadership) -> None:
        _say(f"{leadership.member} leads {role!r} ({leadership.token}); "
             f"starting {' '.join(self.settings.command)}")

    def lost(self, role: str, leadership: Leadership, stop: TenureStop) -> None:
        _say(f"{leadership.member} no longer leads {role!r} ({leadership.token}): "
             f"{stop.reason}" + (f" ({stop.error})" if stop.error else ""))

    def campaign_failed(self, role: str, error: BaseException) -> None:
        _say(f"could not stand for {role!r}: {error}")


def _say(text: str) -> None:
    print(f"krabka run: {text}", file=sys.stderr, flush=True)


def split_command(argv: Sequence[str]) -> tuple[list[str], list[str] | None]:
    """For ``run``, the arguments before the first ``--`` and the command after it.

    argparse cannot take a command line after ``--`` untouched (it drops
    every later ``--`` as well), so the command is cut off first. Other
    subcommands' arguments are returned whole, with None.
    """
    args = list(argv)
    subcommand = next((arg for arg in args if not arg.startswith("-")), None)
    if subcommand != COMMAND or "--" not in args:
        return args, None
    cut = args.index("--")
    return args[:cut], args[cut + 1:]


def add_parser(commands: Subcommands,
               parents: list[argparse.ArgumentParser]) -> None:
    """Register ``run`` among `commands`, with the connection flags of `parents`."""
    run = commands.add_parser(
        COMMAND, parents=parents, help="run a command only while this member leads ROLE",
        usage="krabka run ROLE [options] -- COMMAND [ARGS...]",
        description="Campaign for ROLE and run COMMAND only while this member leads it "
                    "(docs/run.md).")
    add_campaign_arguments(run)
    run.add_argument("--grace", type=float, default=None,
                     help="seconds between SIGTERM and SIGKILL of the command's process "
                          "group (default min(2, fence margin / 2)); never past the fence "
                          "deadline")
    run.add_argument("--health-port", type=int, default=None, metavar="PORT",
                     help="serve liveness on PORT: 200, or 503 while this member leads "
                          "with its renewal overdue past --health-tolerance")
    run.add_argument("--health-host", default="0.0.0.0", metavar="HOST",
                     help="the address --health-port listens on (default all interfaces)")
    run.add_argument("--health-tolerance", type=float, default=None, metavar="SECONDS",
                     help="seconds a leader's renewal may be overdue before liveness "
                          "fails (default the lease duration)")
    run.add_argument("--on-exit", choices=[choice.value for choice in OnExit],
                     default=OnExit.RESIGN.value,
                     help="when the command exits by itself: resign and campaign again "
                          "(default), restart it, or exit with its status")


def _settings(args: argparse.Namespace, command: Sequence[str]) -> RunSettings:
    """The checked settings; a `ValueError` that says what to fix."""
    if not command:
        raise ValueError("no command: give it after --, as in krabka run ROLE -- COMMAND")
    member = campaign_member(args)
    options = campaign_options(args)
    grace = default_grace(options) if args.grace is None else args.grace
    check_grace(grace, options)
    return RunSettings(args.role, member, tuple(command), options, grace, OnExit(args.on_exit),
                       _health_endpoint(args, options))


def _health_endpoint(args: argparse.Namespace,
                     options: LeadershipOptions) -> HealthEndpoint | None:
    if args.health_port is None:
        if args.health_tolerance is not None:
            raise ValueError("--health-tolerance needs --health-port")
        return None
    if not 0 <= args.health_port <= 65535:
        raise ValueError(f"--health-port must be 0 to 65535, got {args.health_port}")
    tolerance = (options.lease_duration if args.health_tolerance is None
                 else args.health_tolerance)
    if not (math.isfinite(tolerance) and tolerance > 0):
        raise ValueError(f"--health-tolerance must be a positive number of seconds, "
                         f"got {tolerance!r}")
    return HealthEndpoint(args.health_host, args.health_port, tolerance)


async def _run(args: argparse.Namespace, settings: RunSettings) -> int:
    clock = SystemClock()
    connection = Connection.from_arguments(args)
    singleton = Singleton(settings, clock)
    async with KafkaTransport(connection.bootstrap_servers, topic=args.topic,
                              terms_topic=args.terms_topic,
                              operation_timeout=args.timeout,
                              **connection.client_options()) as transport:
        runner = LeaderRunner(
            transport, settings.role, settings.member, singleton.lead,
            options=settings.options, clock=clock, observer=_Report(settings),
            stop_timeout=settings.grace + STOP_SLACK)
        health = None
        if settings.health is not None:
            endpoint = settings.health
            health = HealthServer(LeadershipHealth([runner], tolerance=endpoint.tolerance),
                                  endpoint.host, endpoint.port)
            await health.start()
            _say(f"liveness on {endpoint.host}:{health.port}")
        loop = asyncio.get_running_loop()
        stopped_by: list[int] = []
        stop = asyncio.Event()

        def stop_on(signum: int) -> None:
            stopped_by.append(signum)
            stop.set()

        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop_on, signum)
        try:
            running = runner.start()
            stopping = asyncio.ensure_future(stop.wait())
            finishing = asyncio.ensure_future(singleton.finished.wait())
            try:
                await asyncio.wait({running, stopping, finishing},
                                   return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopping.cancel()
                finishing.cancel()
            await runner.stop()
        finally:
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)
            if health is not None:
                await health.stop()
    if stopped_by:
        return 128 + stopped_by[0]
    if singleton.status is not None:
        return singleton.status
    raise CoordinationError("the runner stopped without being asked to")


def main(args: argparse.Namespace, command: Sequence[str] | None) -> int:
    """Run ``krabka run``; its exit status (docs/run.md#exit-statuses)."""
    try:
        settings = _settings(args, command or ())
    except ValueError as exc:
        print(f"krabka run: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if shutil.which(settings.command[0]) is None:
        print(f"krabka run: error: {settings.command[0]}: command not found", file=sys.stderr)
        return EXIT_NOT_FOUND
    try:
        return asyncio.run(_run(args, settings))
    except ConfigurationError as exc:
        print(f"krabka run: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except CoordinationError as exc:
        print(f"krabka run: error: {exc}", file=sys.stderr)
        return EXIT_CLUSTER
    except OSError as exc:  # the health port cannot be listened on
        print(f"krabka run: error: --health-port: {exc}", file=sys.stderr)
        return EXIT_CLUSTER

"""A member process for the real-process fault runs.

    python -m tests.faults.fault_member --bootstrap-servers B --role R --member M \\
        --topic STATE --output OUT --journal FILE [--clock-file F] [--skew-ms N] \\
        [--fencing term --terms-topic TERMS]

It runs the library's `LeaderRunner` for one role with a function that makes
one guarded history write (`tests.faults.history.HistoryWriter`) every
``--interval`` seconds, logging each attempt to its journal before and
after, so a SIGKILL in the middle of a write leaves an ``unknown`` attempt
behind. Unlike the example service it never checks ``fenced()`` before a
write: a zombie whose clocks say its lease is live writes, and the broker
must refuse it. The runner cancels the function when the tenure ends.

With ``--fencing term`` the member elects through claims on ``--terms-topic``
and declares ``--output`` as its leader's output (docs/term-mode.md): the
broker accepts a zombie's writes, and readers applying a `TermFilter` drop
those after the newer term's barrier.

Its clocks are the machine's, moved by what the test writes to
``--clock-file``: ``WALL_MS [MONO_MS]``, re-read as it changes. WALL_MS
moves the wall clock (as an NTP step does; ``--skew-ms`` adds a fixed skew),
MONO_MS the monotonic clock the leader's fence deadline runs on. A frozen VM
stops both, so a test that SIGSTOPs a member and then sets both back by the
time it was stopped makes a zombie that believes its lease. The monotonic
clock never runs backwards: set back, it holds still until the machine's
catches up. Journal timestamps and every ``t_ms`` are the true wall clock,
comparable across processes.

Every stdout line is a JSON event: ``started``; ``leading`` (with the token:
``producer_id`` and ``producer_epoch``, or ``term``); ``renewed`` (a lease
renewal or heartbeat acknowledged: ``sent_ms`` is when it was sent, true wall
clock, ``latency_ms`` how long it took); ``fenced`` (the tenure ended on its own,
printed the moment it ended, when the runner starts stopping the function:
``error`` says why); ``resigned`` (the runner stopped the function and
handed the role back); ``left`` (stopped while not leading; with
``--leave-on-stop`` its registration is removed); ``done``;
``acquire-error`` when a campaign failed (the runner tries again after
``--retry`` seconds); ``write-error`` when a write failed with an error
other than a fence. The library's log goes to stderr.

SIGTERM or SIGINT stops the runner: the function first, then the role is
resigned (deregistering only with ``--leave-on-stop``). ``SIGUSR1`` makes
the member stop itself (SIGSTOP) inside its next guarded transaction, after
the send and before the commit, printing ``freezing`` first: a leader frozen
with a transaction open, at a known point. With ``--freeze-in write`` it
stops instead at its next write through the transport's plain producer
(term mode's writes), past the library's last check: on thawing that write
is sent whatever the member has learnt meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from krabka import (
    LeaderRunner,
    Leadership,
    LeadershipOptions,
    RunnerObserver,
    RunnerState,
    TenureStop,
    TermToken,
)
from krabka.defaults import TERMS_TOPIC
from krabka.kafka import KafkaTransport
from krabka.options import FENCINGS
from tests.faults.history import HistoryWriter


def emit(event: str, **fields: Any) -> None:
    """One JSON line on stdout, flushed at once for the test that follows it."""
    print(json.dumps({"event": event, "t_ms": time.time_ns() // 1_000_000, "pid": os.getpid(),
                      **fields}), flush=True)


class InjectedClock:
    """The machine's clocks moved by the offsets a test writes to a file.

    The wall clock is moved by a fixed skew plus the file's first number;
    the monotonic clock by its second (0 if absent) and never runs backwards.
    """

    # A sleeper wakes at least this often, so a changed offset takes effect.
    POLL_S = 0.05

    def __init__(self, skew_ms: int, offset_file: Path | None) -> None:
        self._skew = skew_ms
        self._file = offset_file
        self._stamp: float | None = None
        self._offsets = (0, 0)
        self._monotonic_seen: int | None = None

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000 + self._skew + self._read()[0]

    def monotonic_ms(self) -> int:
        now = time.monotonic_ns() // 1_000_000 + self._read()[1]
        if self._monotonic_seen is not None and now < self._monotonic_seen:
            return self._monotonic_seen  # set back: it holds still, as a frozen VM's did
        self._monotonic_seen = now
        return now

    async def sleep_until(self, at_ms: int) -> None:
        while (remaining := at_ms - self.now_ms()) > 0:  # noqa: ASYNC110
            await asyncio.sleep(min(remaining / 1000, self.POLL_S))

    async def sleep_until_monotonic(self, at_ms: int) -> None:
        while (remaining := at_ms - self.monotonic_ms()) > 0:  # noqa: ASYNC110
            await asyncio.sleep(min(remaining / 1000, self.POLL_S))

    def _read(self) -> tuple[int, int]:
        if self._file is None:
            return self._offsets
        try:
            stamp = self._file.stat().st_mtime_ns
        except FileNotFoundError:
            return self._offsets
        if stamp != self._stamp:
            self._stamp = stamp
            numbers = [int(word) for word in self._file.read_text().split()]
            self._offsets = (numbers[0] if numbers else 0, numbers[1] if len(numbers) > 1 else 0)
        return self._offsets


def token_fields(leadership: Leadership) -> dict[str, int]:
    """The tenure's token and deadline as event fields."""
    token = leadership.token
    if isinstance(token, TermToken):
        return {"term": token.term, "fence_deadline": leadership.fence_deadline}
    return {"producer_id": token.producer_id, "producer_epoch": token.producer_epoch,
            "deadline": leadership.lease.deadline}


async def lead(leadership: Leadership, writer: HistoryWriter, interval: float) -> None:
    """Write until the runner cancels this; after a fenced write, wait for that.

    Errors other than a fence are retried: the tenure decides.
    """
    while True:
        try:
            attempt = await writer.write(leadership)
        except Exception as exc:  # logged as unknown in the journal
            emit("write-error", error=repr(exc))
        else:
            if attempt.outcome == "fenced":
                # A fenced write ends the tenure (or the deadline that refused
                # it is about to); the runner cancels this function then.
                await asyncio.wait({leadership.done})
                return
        await asyncio.sleep(interval)


class Printer(RunnerObserver):
    """Prints a runner's reports as JSON lines."""

    def __init__(self, member: str) -> None:
        self.member = member
        self.runner: LeaderRunner | None = None
        self._fenced: set[int] = set()

    def elected(self, role: str, leadership: Leadership) -> None:
        emit("leading", member=self.member, tenure=leadership.tenure,
             **token_fields(leadership))
        leadership.done.add_done_callback(lambda _: self._ended(leadership))

    def _ended(self, leadership: Leadership) -> None:
        # Still LEADING when the tenure ends: the runner has not started a
        # hand-over, so it ended on its own and the runner reports a fence.
        # Printed now, not after the hand-over (which can take the stop
        # timeout while the broker is away).
        if self.runner is not None and self.runner.state is RunnerState.LEADING:
            self._print_fenced(leadership)

    def _print_fenced(self, leadership: Leadership) -> None:
        if leadership.tenure not in self._fenced:
            self._fenced.add(leadership.tenure)
            emit("fenced", member=self.member, tenure=leadership.tenure,
                 error=str(leadership.err))

    def renewed(self, role: str, leadership: Leadership, latency: float) -> None:
        now = time.time_ns() // 1_000_000
        latency_ms = round(latency * 1000)
        emit("renewed", member=self.member, tenure=leadership.tenure, latency_ms=latency_ms,
             sent_ms=now - latency_ms, **token_fields(leadership))

    def fenced(self, role: str, leadership: Leadership) -> None:
        self._print_fenced(leadership)

    def lost(self, role: str, leadership: Leadership, stop: TenureStop) -> None:
        if stop.reason != "fenced":
            emit("resigned", member=self.member, tenure=leadership.tenure, reason=stop.reason,
                 error=stop.error)

    def campaign_failed(self, role: str, error: BaseException) -> None:
        emit("acquire-error", error=repr(error))


async def serve(args: argparse.Namespace) -> int:
    loop = asyncio.get_running_loop()
    clock = InjectedClock(args.skew_ms, args.clock_file)
    incarnation = f"{args.member}.{os.getpid()}"
    freeze = asyncio.Event()
    loop.add_signal_handler(signal.SIGUSR1, freeze.set)

    def freeze_if_asked() -> None:
        if freeze.is_set():
            freeze.clear()
            emit("freezing")
            os.kill(os.getpid(), signal.SIGSTOP)

    # Term mode's leader may write only to the topics it declares.
    outputs = (args.output,) if args.fencing == "term" else ()
    options = LeadershipOptions(args.partitions, args.lease, args.renew, args.stagger,
                                fencing=args.fencing, outputs=outputs)
    printer = Printer(args.member)
    with args.journal.open("a") as journal:
        writer = HistoryWriter(f"{incarnation}/{args.role}", args.output, 0, journal=journal,
                               before_commit=(freeze_if_asked if args.freeze_in == "transaction"
                                              else None))

        async def work(leadership: Leadership) -> None:
            await lead(leadership, writer, args.interval)

        async with KafkaTransport(args.bootstrap_servers, topic=args.topic,
                                  terms_topic=args.terms_topic) as transport:
            if args.freeze_in == "write":
                _freeze_before_each_write(transport, freeze_if_asked)
            runner = LeaderRunner(transport, args.role, args.member, work, options=options,
                                  clock=clock, observer=printer,
                                  retry_interval=args.retry, max_backoff=args.retry)
            printer.runner = runner
            stopping: list[asyncio.Future[None]] = []

            def stop() -> None:
                stopping.append(asyncio.ensure_future(
                    runner.stop(deregister=args.leave_on_stop)))

            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(signum, stop)
            emit("started", member=args.member)
            await runner.run()
            if runner.last_stop is None or runner.last_stop.reason != "stopped":
                emit("left", member=args.member)
    emit("done", member=args.member)
    return 0


def _freeze_before_each_write(transport: KafkaTransport, freeze: Callable[[], None]) -> None:
    """Call `freeze` at the start of each `write_output`, before the record is sent."""
    write_output = transport.write_output

    async def frozen_first(*args: Any, **kwargs: Any) -> int:
        freeze()
        return await write_output(*args, **kwargs)

    transport.write_output = frozen_first  # type: ignore[method-assign]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--role", required=True)
    parser.add_argument("--member", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--journal", type=Path, required=True)
    parser.add_argument("--fencing", choices=FENCINGS, default="epoch")
    parser.add_argument("--terms-topic", default=TERMS_TOPIC)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--lease", type=float, default=3.0)
    parser.add_argument("--renew", type=float, default=1.0)
    parser.add_argument("--stagger", type=float, default=0.5)
    parser.add_argument("--interval", type=float, default=0.1)
    parser.add_argument("--retry", type=float, default=1.0,
                        help="seconds the runner waits after a failed campaign or a short "
                             "tenure before it campaigns again (no doubling)")
    parser.add_argument("--skew-ms", type=int, default=0)
    parser.add_argument("--clock-file", type=Path, default=None)
    parser.add_argument("--leave-on-stop", action="store_true")
    parser.add_argument("--freeze-in", choices=("transaction", "write"), default="transaction",
                        help="where SIGUSR1 freezes the member (see above)")
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    return asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())

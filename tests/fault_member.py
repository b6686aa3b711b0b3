"""A member process for the real-process fault runs (issue 5, item 3).

    python -m tests.fault_member --bootstrap-servers B --role R --member M \\
        --topic STATE --output OUT --journal FILE [--clock-file F] [--skew-ms N]

It competes for one role and, while it leads, makes one guarded history
write (`tests.history.HistoryWriter`) every ``--interval`` seconds, logging
each attempt to its journal before and after, so a SIGKILL in the middle of
a write leaves an ``unknown`` attempt behind. Unlike the example service it
never checks ``fenced()`` before a write: a zombie whose clock says its lease
is live writes, and the broker must refuse it.

Its clock is the machine's wall clock moved by ``--skew-ms`` plus the
integer in ``--clock-file`` (milliseconds, re-read as it changes), so a test
can skew a running member or set its clock back while it is stopped (a
frozen VM). Journal timestamps are the true wall clock, comparable across
processes.

Every stdout line is a JSON event: ``leading``, ``fenced`` (the tenure ended
on its own: ``error`` says why), ``resigned``, ``left`` (a standby that
stopped and, with ``--leave-on-stop``, removed its registration) and
``done``, and ``acquire-error`` when an acquisition failed and is retried
(after a second). The library's log goes to stderr.

``SIGUSR1`` makes the member stop itself (SIGSTOP) inside its next guarded
transaction, after the send and before the commit, printing ``freezing``
first: a leader frozen with a transaction open, at a known point.
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
import time
from pathlib import Path
from typing import Any

from coordination import (
    FencedError,
    Leadership,
    acquire_leadership,
    encode_key,
    registration_key,
    role_partition,
)
from coordination.kafka import KafkaTransport
from tests.history import HistoryWriter

ACQUIRE_BACKOFF_S = 1.0


def emit(event: str, **fields: Any) -> None:
    """One JSON line on stdout, flushed at once for the test that follows it."""
    print(json.dumps({"event": event, "t_ms": time.time_ns() // 1_000_000, "pid": os.getpid(),
                      **fields}), flush=True)


class InjectedClock:
    """The wall clock plus a fixed skew plus the offset a test writes to a file."""

    # A sleeper wakes at least this often, so a changed offset takes effect.
    POLL_S = 0.05

    def __init__(self, skew_ms: int, offset_file: Path | None) -> None:
        self._skew = skew_ms
        self._file = offset_file
        self._stamp: float | None = None
        self._offset = 0

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000 + self._skew + self._file_offset()

    async def sleep_until(self, at_ms: int) -> None:
        while (remaining := at_ms - self.now_ms()) > 0:  # noqa: ASYNC110
            await asyncio.sleep(min(remaining / 1000, self.POLL_S))

    def _file_offset(self) -> int:
        if self._file is None:
            return 0
        try:
            stamp = self._file.stat().st_mtime_ns
        except FileNotFoundError:
            return 0
        if stamp != self._stamp:
            self._stamp = stamp
            text = self._file.read_text().strip()
            self._offset = int(text) if text else 0
        return self._offset


async def lead(leadership: Leadership, writer: HistoryWriter, interval: float) -> None:
    """Write until a write is fenced or the tenure ends; other errors are retried."""
    while not leadership.done.done():
        try:
            attempt = await writer.write(leadership)
        except Exception as exc:  # logged as unknown in the journal; the tenure decides
            emit("write-error", error=repr(exc))
        else:
            if attempt.outcome == "fenced":
                return
        await asyncio.sleep(interval)


async def serve(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    clock = InjectedClock(args.skew_ms, args.clock_file)
    incarnation = f"{args.member}.{os.getpid()}"
    freeze = asyncio.Event()
    loop.add_signal_handler(signal.SIGUSR1, freeze.set)

    def freeze_inside_the_transaction() -> None:
        if freeze.is_set():
            freeze.clear()
            emit("freezing")
            os.kill(os.getpid(), signal.SIGSTOP)

    with args.journal.open("a") as journal:
        writer = HistoryWriter(f"{incarnation}/{args.role}", args.output, 0, journal=journal,
                               before_commit=freeze_inside_the_transaction)
        async with KafkaTransport(args.bootstrap_servers, topic=args.topic) as transport:
            emit("started", member=args.member)
            while not stop.is_set():
                leadership = await _acquire_or_stop(transport, args, clock, stop)
                if leadership is None:
                    if args.leave_on_stop:
                        await transport.append(
                            role_partition(args.role, args.partitions),
                            encode_key(registration_key(args.role, args.member)), None)
                    emit("left", member=args.member)
                    break
                emit("leading", member=args.member, tenure=leadership.tenure,
                     producer_id=leadership.token.producer_id,
                     producer_epoch=leadership.token.producer_epoch,
                     deadline=leadership.lease.deadline)
                await _work_until_over(leadership, writer, args.interval, stop)
                if stop.is_set():
                    await leadership.resign()
                    emit("resigned", member=args.member, tenure=leadership.tenure)
                    break
                emit("fenced", member=args.member, tenure=leadership.tenure,
                     error=str(leadership.err))
                with contextlib.suppress(Exception):
                    await leadership.resign(deregister=False)
    emit("done", member=args.member)
    return 0


async def _acquire_or_stop(
    transport: KafkaTransport, args: argparse.Namespace, clock: InjectedClock, stop: asyncio.Event
) -> Leadership | None:
    """Acquire the role, retrying after transport errors (a broker outage
    outlasting the read timeout), until acquired or stopped."""
    while not stop.is_set():
        try:
            return await _acquire_once(transport, args, clock, stop)
        except Exception as exc:
            emit("acquire-error", error=repr(exc))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), ACQUIRE_BACKOFF_S)
    return None


async def _acquire_once(
    transport: KafkaTransport, args: argparse.Namespace, clock: InjectedClock, stop: asyncio.Event
) -> Leadership | None:
    acquiring = asyncio.ensure_future(acquire_leadership(
        transport, args.role, args.member, partitions=args.partitions,
        lease_duration=args.lease, renew_interval=args.renew,
        challenge_stagger=args.stagger, clock=clock,
    ))
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait([acquiring, stopping], return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if not acquiring.done():
        acquiring.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await acquiring
        return None
    return acquiring.result()


async def _work_until_over(
    leadership: Leadership, writer: HistoryWriter, interval: float, stop: asyncio.Event
) -> None:
    working = asyncio.ensure_future(lead(leadership, writer, interval))
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait([working, stopping, leadership.done], return_when=asyncio.FIRST_COMPLETED)
    working.cancel()
    stopping.cancel()
    with contextlib.suppress(asyncio.CancelledError, FencedError):
        await working
    if not stop.is_set():
        await leadership.done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--role", required=True)
    parser.add_argument("--member", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--journal", type=Path, required=True)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--lease", type=float, default=3.0)
    parser.add_argument("--renew", type=float, default=1.0)
    parser.add_argument("--stagger", type=float, default=0.5)
    parser.add_argument("--interval", type=float, default=0.1)
    parser.add_argument("--skew-ms", type=int, default=0)
    parser.add_argument("--clock-file", type=Path, default=None)
    parser.add_argument("--leave-on-stop", action="store_true")
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    return asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())

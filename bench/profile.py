"""Where the time of a graceful handover and of an authority check goes.

    python -m bench.profile --bootstrap-servers HOST:PORT [--trials 10] [--pyinstrument DIR]
    python -m bench.profile --bootstrap-servers HOST:PORT --calls 300 transactions
    python -m bench.profile --bootstrap-servers HOST:PORT --trials 5 requests

Handover: two `KafkaTransport`s in one process (leader A, standby B, one role,
lease 3 s, renew 1 s, stagger 0.5 s); B's transport methods are wrapped to
time-stamp each stage of its take-over after A calls ``resign()``, and A's
the stages of its resignation (the authority check, the conditional bump,
the tombstone's transaction, closing the producer, the deregistration); when
B's tail delivered the tombstone, B's re-read of the partition, InitProducerId
(the new transactional producer's start), the first lease record's
transaction and the first guarded write's transaction. Prints the median of
each stage (and its p90 and p99). Authority: `describe_leadership` calls,
optionally under pyinstrument (HTML into DIR). Transactions: one leader's
guarded transactions back to back, each one record (``--calls`` of them).
Requests: the broker requests of both members during a handover (each
request's start and duration, in order, after A calls ``resign()``, to B's
first write committed), B's first write given to `acquire_leadership`
(``first``) so that it rides in the first lease's transaction; the first
trial is the process's first handover. Not part of ``python -m bench``: a
tool for the explanations in docs/benchmarks.md and the decision records.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import statistics
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from bench.stats import percentile
from krabka import Leadership, acquire_leadership, describe_leadership
from krabka.kafka import KafkaTransport


def _ms() -> float:
    return time.perf_counter() * 1000


def _wrap(obj: Any, name: str, marks: list[tuple[str, float, float]]) -> None:
    original: Callable[..., Any] = getattr(obj, name)

    async def timed(*args: Any, **kwargs: Any) -> Any:
        started = _ms()
        try:
            return await original(*args, **kwargs)
        finally:
            marks.append((name, started, _ms()))

    setattr(obj, name, timed)


async def _create(bootstrap: str, topic: str, output: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([
            NewTopic(topic, 4, 1, topic_configs={"cleanup.policy": "compact"}),
            NewTopic(output, 1, 1)])
    finally:
        await admin.close()


async def handover(bootstrap: str, trials: int, tail_wait_ms: int,
                   client_options: dict[str, Any]) -> None:
    suffix = uuid.uuid4().hex[:6]
    topic, output = f"profile-state-{suffix}", f"profile-out-{suffix}"
    await _create(bootstrap, topic, output)
    stages: dict[str, list[float]] = {}
    for trial in range(trials):
        role = f"profile.{suffix}.{trial}"
        async with KafkaTransport(bootstrap, topic=topic, tail_wait_ms=tail_wait_ms,
                                  **client_options) as ta, \
                KafkaTransport(bootstrap, topic=topic, tail_wait_ms=tail_wait_ms,
                               **client_options) as tb:
            options: dict[str, Any] = dict(partitions=4, lease_duration=3.0,
                                           renew_interval=1.0, challenge_stagger=0.5)
            a = await acquire_leadership(ta, role, "a", **options)
            b_task = asyncio.ensure_future(acquire_leadership(tb, role, "b", **options))
            await asyncio.sleep(0.5)  # b registers and tails
            marks: list[tuple[str, float, float]] = []
            for name in ("read_partition", "check_topic", "acquire_epoch", "begin_transaction"):
                _wrap(tb, name, marks)
            a_marks: list[tuple[str, float, float]] = []
            # The resignation: is the token current, the conditional bump, the
            # tombstone's transaction (begin, write, commit), closing the
            # producer, the deregistration.
            for name in ("describe_epoch", "acquire_epoch", "begin_transaction", "release",
                         "append"):
                _wrap(ta, name, a_marks)
            t0 = _ms()
            await a.resign()
            t_resigned = _ms()
            b = await b_task
            t_leading = _ms()
            async with b.transaction() as txn:
                await txn.send(output, b"x", partition=0)
            t_wrote = _ms()
            rows = {"A resign() returned": t_resigned - t0,
                    "B leading": t_leading - t0, "B first write committed": t_wrote - t0}
            for who, stamps in (("A", a_marks), ("B", marks)):
                firsts: dict[str, tuple[float, float]] = {}
                for name, start, end in stamps:
                    firsts.setdefault(name, (start, end))
                for name, (start, end) in firsts.items():
                    rows[f"{who} {name} start"] = start - t0
                    rows[f"{who} {name} took"] = end - start
            for key, value in rows.items():
                stages.setdefault(key, []).append(value)
            await b.resign()
    print(f"graceful handover, {trials} trials, tail_wait_ms={tail_wait_ms}, "
          f"client options {client_options}; "
          "ms after A calls resign() (median, p90, p99, min, max):")
    for key, values in sorted(stages.items(), key=lambda kv: statistics.median(kv[1])):
        ordered = sorted(values)
        print(f"  {key:<34} {statistics.median(values):8.1f} {percentile(ordered, 90):8.1f} "
              f"{percentile(ordered, 99):8.1f} {ordered[0]:8.1f} {ordered[-1]:8.1f}")


_WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="?")
# The direct lease write's requests (krabka.kafka.producer.direct_lease), by API key.
_DIRECT = {24: "AddPartitionsToTxn (direct)", 0: "Produce (direct)", 26: "EndTxn (direct)"}


def _log_requests(log: list[tuple[str, str, float, float]]) -> None:
    """Log every request aiokafka's connections send: (member, request, start, end).

    The member is the context's `_WHO`: the tasks a member's transport and
    campaign start inherit it.
    """
    from aiokafka import conn

    send = conn.AIOKafkaConnection.send

    def logged(self: Any, request: Any, expect_response: bool = True) -> Any:
        who, started = _WHO.get(), _ms()
        name = type(request).__name__
        if name == "DirectRequest":
            name = _DIRECT.get(request.api_key, repr(request))
        sent = send(self, request, expect_response)
        if not expect_response:
            return sent

        async def answered() -> Any:
            try:
                return await sent
            finally:
                log.append((who, name, started, _ms()))
        return answered()

    conn.AIOKafkaConnection.send = logged  # type: ignore[method-assign]


async def _as(who: str, work: Any) -> Any:
    token = _WHO.set(who)
    try:
        return await work
    finally:
        _WHO.reset(token)


async def requests(bootstrap: str, trials: int, tail_wait_ms: int) -> None:
    log: list[tuple[str, str, float, float]] = []
    _log_requests(log)
    suffix = uuid.uuid4().hex[:6]
    topic, output = f"profile-state-{suffix}", f"profile-out-{suffix}"
    await _create(bootstrap, topic, output)
    options: dict[str, Any] = dict(partitions=4, lease_duration=3.0, renew_interval=1.0,
                                   challenge_stagger=0.5, outputs=(output,))

    async def first(txn: Any) -> None:
        await txn.send(output, b"x", partition=0)

    for trial in range(trials):
        role = f"profile.{suffix}.{trial}"
        ta = KafkaTransport(bootstrap, topic=topic, tail_wait_ms=tail_wait_ms)
        tb = KafkaTransport(bootstrap, topic=topic, tail_wait_ms=tail_wait_ms)
        await _as("A", ta.__aenter__())
        await _as("B", tb.__aenter__())
        try:
            a = await _as("A", acquire_leadership(ta, role, "a", **options))
            token = _WHO.set("B")
            b_task = asyncio.ensure_future(acquire_leadership(tb, role, "b", first=first,
                                                              **options))
            _WHO.reset(token)
            await asyncio.sleep(0.5)  # b registers, tails and prepares
            log.clear()
            t0 = _ms()
            await _as("A", a.resign())
            b = await b_task
            t_leading = _ms()
            print(f"trial {trial + 1}: B leading, its first write committed, "
                  f"{t_leading - t0:.1f} ms after A called resign()")
            for who, name, started, ended in sorted(log, key=lambda row: row[2]):
                if ended >= t0 and started <= t_leading:
                    print(f"  {who} {started - t0:7.1f} ms  {ended - started:5.1f} ms  {name}")
            await b.resign()
        finally:
            await ta.__aexit__(None, None, None)
            await tb.__aexit__(None, None, None)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@contextlib.asynccontextmanager
async def _leading(bootstrap: str, lease: float,
                   renew: float) -> AsyncIterator[tuple[KafkaTransport, Leadership, str]]:
    """A transport leading a new role on new topics, and the output topic's name."""
    suffix = uuid.uuid4().hex[:6]
    topic, output = f"profile-state-{suffix}", f"profile-out-{suffix}"
    await _create(bootstrap, topic, output)
    async with KafkaTransport(bootstrap, topic=topic) as transport:
        leadership = await acquire_leadership(transport, f"profile.{suffix}", "a",
                                              partitions=4, lease_duration=lease,
                                              renew_interval=renew, challenge_stagger=0.5)
        yield transport, leadership, output
        await leadership.resign()


async def authority(bootstrap: str, calls: int, html: Path | None) -> None:
    async with _leading(bootstrap, 3.0, 1.0) as (transport, leadership, _):
        for _ in range(50):
            await describe_leadership(transport, leadership.role)
        profiler = None
        if html is not None:
            from pyinstrument import Profiler

            profiler = Profiler(interval=0.0001, async_mode="enabled")
            profiler.start()
        samples = []
        for _ in range(calls):
            started = time.perf_counter()
            await describe_leadership(transport, leadership.role)
            samples.append((time.perf_counter() - started) * 1000)
        if profiler is not None and html is not None:
            profiler.stop()
            await asyncio.to_thread(_write, html / "authority.html", profiler.output_html())
            print(profiler.output_text(unicode=False, color=False, show_all=False)[:6000])
        samples.sort()
        print(f"describe_leadership x{calls}: p50 {statistics.median(samples):.3f} ms, "
              f"min {samples[0]:.3f}, p90 {samples[int(len(samples) * 0.9)]:.3f}")


async def transactions(bootstrap: str, calls: int) -> None:
    """A leader's guarded transactions back to back, each one record to an output."""
    async with _leading(bootstrap, 10.0, 3.0) as (_, leadership, output):
        samples = []
        for _ in range(calls):
            started = time.perf_counter()
            async with leadership.transaction() as txn:
                await txn.send(output, b"x", partition=0)
            samples.append((time.perf_counter() - started) * 1000)
        samples.sort()
        print(f"guarded transactions back to back x{calls}: p50 "
              f"{statistics.median(samples):.2f} ms, p90 {percentile(samples, 90):.2f}, "
              f"p99 {percentile(samples, 99):.2f}; {calls / (sum(samples) / 1000):.0f} a second")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap-servers", required=True)
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--tail-wait-ms", type=int, default=200)
    p.add_argument("--pyinstrument", type=Path, default=None)
    p.add_argument("--retry-backoff-ms", type=int, default=None,
                   help="aiokafka retry_backoff_ms for every client (default: aiokafka's 100)")
    p.add_argument("what", nargs="*", default=["handover", "authority"])
    args = p.parse_args()

    async def run() -> None:
        if "handover" in args.what:
            options = ({} if args.retry_backoff_ms is None
                       else {"retry_backoff_ms": args.retry_backoff_ms})
            await handover(args.bootstrap_servers, args.trials, args.tail_wait_ms, options)
        if "authority" in args.what:
            await authority(args.bootstrap_servers, args.calls, args.pyinstrument)
        if "transactions" in args.what:
            await transactions(args.bootstrap_servers, args.calls)
        if "requests" in args.what:
            await requests(args.bootstrap_servers, args.trials, args.tail_wait_ms)

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

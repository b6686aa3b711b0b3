"""The figures that compare elections: codec, authority-check, graceful-handover,
crash-failover (+ deadline-overshoot) and zombie-writes.

The time figures end where every system's election ends alike, at the new
leader's "leading"; the new leader's first acknowledged write is a row of its
own (``first-write``), measured for every system too.

Every comparison alternates systems trial by trial in one invocation. Each
trial of the process figures uses a fresh role (a fresh etcd prefix,
ZooKeeper path) with exactly one leader and one standby, so the standby is
first in line in every system. The three process figures run krabka once
per fencing mode (`Bench.contenders`: ``krabka`` is epoch mode,
``krabka-term`` term mode), through the same trial code.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from bench import procs
from bench.context import Bench, OutputRecord, fencing_of, now_ms, read_output, stop, wait
from bench.stats import Result

# --------------------------------------------------------------------------- helpers


async def alternate(bench: Bench, figure: str, systems: list[str],
                    trial: Callable[[str, int], Awaitable[None]], *,
                    warmup: int = 0) -> dict[str, list[str]]:
    """Run `trial(system, i)` for i in range(trials), systems alternating; failures kept.

    With `warmup`, `warmup` rounds come first with i from -warmup to -1: the
    trial is to keep what those measure apart (a fresh broker's JVM answers
    the first hundred handovers about twice as slowly as a warmed one, and
    ZooKeeper's runs on a JVM too). Their failures are printed, not kept.
    """
    failures: dict[str, list[str]] = {s: [] for s in systems}
    for i in range(-warmup, bench.trials):
        order = systems if i % 2 == 0 else list(reversed(systems))
        for system in order:
            started = time.monotonic()
            try:
                await asyncio.wait_for(trial(system, i), timeout=180)
            except Exception as exc:
                if i < 0:
                    print(f"  [{figure}] {system} warm-up trial {i + warmup + 1} failed: "
                          f"{exc!r}"[:600], flush=True)
                    continue
                failures[system].append(f"trial {i}: {exc!r}"[:400])
                print(f"  [{figure}] {system} trial {i} failed: {exc!r}"[:600], flush=True)
                traceback.print_exc(limit=3)
            else:
                if i >= 0:
                    print(f"  [{figure}] {system} trial {i + 1}/{bench.trials} "
                          f"({time.monotonic() - started:.1f} s)", flush=True)
        if i < 0 and (i == -1 or (i + warmup + 1) % 10 == 0):
            print(f"  [{figure}] warm-up {i + warmup + 1}/{warmup} done", flush=True)
    return failures


# --------------------------------------------------------------------------- codec


def _codec_inputs(count: int) -> tuple[list[Any], list[Any]]:
    from krabka.format.records import Lease, lease_key

    now = int(time.time() * 1000)
    keys = [lease_key(f"acme.role-{i:05d}") for i in range(count)]
    leases = [Lease(f"worker-{i % 7}.example:6066", 4000 + i, i % 32767, now, now + 3000)
              for i in range(count)]
    return keys, leases


async def codec(bench: Bench) -> None:
    """Records (key + lease value) encoded and decoded per second; orjson as a yardstick."""
    import orjson

    from krabka.format.records import decode_key, decode_lease, encode_key, encode_lease

    count = 5_000 if bench.quick else 20_000
    keys, leases = _codec_inputs(count)
    encoded = [(encode_key(k), encode_lease(v)) for k, v in zip(keys, leases, strict=True)]
    dicts = [({"role": k.role, "kind": 1, "member": ""},
              {"member": v.member, "producer_id": v.producer_id,
               "producer_epoch": v.producer_epoch, "granted_at": v.granted_at,
               "deadline": v.deadline}) for k, v in zip(keys, leases, strict=True)]
    jsons = [(orjson.dumps(k), orjson.dumps(v)) for k, v in dicts]
    rates: dict[tuple[str, str], list[float]] = {}
    trials = max(bench.trials, 3)
    for _ in range(trials):
        t0 = time.perf_counter()
        for k, v in zip(keys, leases, strict=True):
            encode_key(k)
            encode_lease(v)
        t1 = time.perf_counter()
        for kb, vb in encoded:
            decode_key(kb)
            decode_lease(vb)
        t2 = time.perf_counter()
        for kd, vd in dicts:
            orjson.dumps(kd)
            orjson.dumps(vd)
        t3 = time.perf_counter()
        for kb, vb in jsons:
            orjson.loads(kb)
            orjson.loads(vb)
        t4 = time.perf_counter()
        rates.setdefault(("krabka", "encode"), []).append(count / (t1 - t0))
        rates.setdefault(("krabka", "decode"), []).append(count / (t2 - t1))
        rates.setdefault(("orjson", "encode"), []).append(count / (t3 - t2))
        rates.setdefault(("orjson", "decode"), []).append(count / (t4 - t3))
        await asyncio.sleep(0)
    for (system, metric), samples in rates.items():
        bench.add(Result(
            "codec", system, "records/s", samples,
            bench.config(records_per_trial=count, record="lease key + lease value",
                         yardstick="orjson dumps/loads of the same fields (no validation)"),
            metric=metric, higher_is_better=True))


# --------------------------------------------------------------------------- authority-check


AUTHORITY_QUESTIONS = {
    "krabka": ("krabka", "who-leads"),
    "krabka-token": ("krabka", "token"),
    "etcd": ("etcd", "who-leads"),
    "zookeeper": ("zookeeper", "who-leads"),
}
"""Each authority-check client: its system and its question."""

AUTHORITY_WHAT = {
    "krabka": "describe_role_state: the role's partition of the state topic read to its "
              "last stable offset; its latest lease names member a, deadline not passed",
    "krabka-token": "describe_leadership: DescribeTransactions to the cached transaction "
                    "coordinator (1 round trip) + authoritative(token): is this token "
                    "current, which no peer's read answers",
    "etcd": "Election.Leader: one Range, prefix, sorted by create revision, limit 1 "
            "(etcd3 gRPC client)",
    "zookeeper": "get_children(election path) + get(lowest child) (2 round trips, kazoo)",
}


async def authority_check(bench: Bench) -> None:
    """A third party asks who leads, every system alike (krabka: the state topic's
    latest lease; etcd: Election.Leader; ZooKeeper: the lowest child); krabka's
    "is this token current" (DescribeTransactions) is a row of its own, ``token``.

    Each question's client is a process of its own (`bench.authority_client`);
    the bench asks them for a block of 20 calls each in turn, the order
    reversed every block, so the clients share the machine's conditions but
    not a process.
    """
    systems = bench.active()
    role = bench.role("authority", "x")
    output = f"bench-authority-{bench.run_id}"
    await bench.create_topic(output, 1)
    leaders = {}
    clients: dict[str, procs.Child] = {}
    per_block = 20
    try:
        for system in systems:
            leaders[system] = bench.worker(system, role, "a", output, interval=1.0)
        leading = {s: await wait(c, "leading", 60) for s, c in leaders.items()}
        for label, (system, question) in AUTHORITY_QUESTIONS.items():
            if system not in leaders:
                continue
            args = ["--system", system, "--question", question, "--role", role,
                    "--calls", str(per_block), "--warmup", str(per_block),
                    "--lease", str(bench.timing.lease), "--renew", str(bench.timing.renew)]
            if system == "krabka":
                args += ["--bootstrap-servers", bench.bootstrap, "--state-topic",
                         bench.state_topic, "--partitions", str(bench.partitions),
                         "--token", f"{leading[system]['producer_id']}:"
                                    f"{leading[system]['producer_epoch']}"]
            else:
                args += [f"--{system}", getattr(bench, system)]
            clients[label] = procs.python(
                "bench.authority_client", *args, name=f"authority:{label}",
                log=bench.folder / "logs" / f"{role}.client.{label}.log")
        for client in clients.values():
            await wait(client, "ready", 60)
        samples: dict[str, list[float]] = {label: [] for label in clients}
        for block in range(1, bench.trials + 1):
            for label in (list(clients) if block % 2 else list(reversed(clients))):
                clients[label].signal(signal.SIGUSR1)
                samples[label] += (await wait(clients[label], "block", 60, n=block))["ms"]
        for label, values in samples.items():
            system, question = AUTHORITY_QUESTIONS[label]
            bench.add(Result("authority-check", system, "ms", values,
                             bench.config(calls=len(values), warmup=per_block,
                                          question=question, what=AUTHORITY_WHAT[label],
                                          note=f"sequential calls from one client, each "
                                               f"question's in a process of its own, blocks "
                                               f"of {per_block} alternating clients"),
                             metric=None if question == "who-leads" else question))
    finally:
        await stop(*clients.values(), *leaders.values())


# --------------------------------------------------------------------------- graceful-handover

LEADING = ("the new leader's 'leading' (krabka: its first lease record committed; term "
           "mode: its claim won the term; peers: the recipe found it first in line)")


def _first_write(system: str) -> str:
    """Where the first-write rows stop the clock for `system`."""
    fencing = fencing_of(system)
    if fencing == "epoch":
        return "the new leader's first committed guarded write"
    if fencing == "term":
        return ("the new leader's first record acknowledged (stamped with its term, after "
                "its barrier)")
    return ("the new leader's first write acknowledged (a plain idempotent produce, after "
            "the recipe's own leadership check)")


async def graceful_handover(bench: Bench) -> None:
    """The old leader's SIGUSR1 (resign) to the new leader's 'leading', every system alike;
    to its first acknowledged write as a second row; the invocation's first rounds apart."""
    systems = bench.contenders()
    output = f"bench-handover-{bench.run_id}"
    await bench.create_topic(output, 1)
    to_leading: dict[str, list[float]] = {s: [] for s in systems}
    first_write: dict[str, list[float]] = {s: [] for s in systems}
    resign_call: dict[str, list[float]] = {s: [] for s in systems}
    warming: dict[str, list[float]] = {s: [] for s in systems}
    cold: dict[str, list[float]] = {s: [] for s in systems}
    cold_first_write: dict[str, list[float]] = {s: [] for s in systems}
    first_round = -bench.warmup

    async def trial(system: str, i: int) -> None:
        a, b = await bench.pair(system, bench.role("handover", f"{system}-{i}"), output)
        try:
            await asyncio.sleep(random.uniform(0, bench.timing.renew))
            a.signal(signal.SIGUSR1)
            resigning = await wait(a, "resigning", 15)
            leading = await wait(b, "leading", 30)
            wrote = await wait(b, "wrote", 30)
            resigned = await wait(a, "resigned", 15)
            if i - first_round < bench.cold:
                cold[system].append(leading["t"] - resigning["t"])
                cold_first_write[system].append(wrote["t"] - resigning["t"])
            if i < 0:
                warming[system].append(leading["t"] - resigning["t"])
                return
            to_leading[system].append(leading["t"] - resigning["t"])
            first_write[system].append(wrote["t"] - resigning["t"])
            resign_call[system].append(resigned["t"] - resigning["t"])
        finally:
            await stop(a, b)

    failures = await alternate(bench, "graceful-handover", systems, trial, warmup=bench.warmup)
    start = "the old leader's SIGUSR1, stamped by its signal handler (it resigns then)"
    for system in systems:
        fencing = fencing_of(system)
        common = {"write_interval_s": bench.write_interval, "fencing": fencing,
                  "tail_wait_ms": bench.tail_wait_ms if fencing else None}
        bench.add(Result(
            "graceful-handover", system, "ms", to_leading[system],
            bench.config(start=start, end=LEADING, **common),
            extra={"resign_call_ms": resign_call[system], "failures": failures[system],
                   "warmup_ms": warming[system]}))
        bench.add(Result(
            "graceful-handover", system, "ms", first_write[system],
            bench.config(start=start, end=_first_write(system), **common),
            metric="first-write"))
        bench.add(Result(
            "graceful-handover", system, "ms", cold[system],
            bench.config(start=start, end=LEADING, **common,
                         rounds=f"the first {bench.cold} rounds of graceful-handover in this "
                                f"invocation, warm-up or timed, each on fresh worker "
                                f"processes",
                         servers_started_by_this_run=bench.fresh_servers,
                         figures_run_before=list(bench.ran)),
            metric="cold", extra={"first_write_ms": cold_first_write[system]}))


# --------------------------------------------------------------------------- crash-failover


async def _last_krabka_deadline(bench: Bench, role: str, member: str) -> int | None:
    from krabka.format.partition import role_partition
    from krabka.format.records import Kind, decode_key, decode_lease
    from krabka.kafka import KafkaTransport

    async with KafkaTransport(bench.bootstrap, topic=bench.state_topic) as transport:
        read = await transport.read_partition(role_partition(role, bench.partitions))
    deadline = None
    for record in read.records:
        key = decode_key(record.key)
        if key.role != role or key.kind != Kind.LEASE or not record.value:
            continue
        lease = decode_lease(record.value)
        if lease.member == member:
            deadline = lease.deadline
    return deadline


async def _last_term_deadline(bench: Bench, role: str, member: str) -> int | None:
    """The killed leader's last sign of life on the terms topic (its claim or last
    heartbeat, by its own wall clock) plus the election timeout."""
    from krabka.format.partition import role_partition
    from krabka.format.terms import TermKind, decode_claim, decode_heartbeat, decode_term_key
    from krabka.kafka import KafkaTransport

    async with KafkaTransport(bench.bootstrap, topic=bench.state_topic,
                              terms_topic=bench.terms_topic) as transport:
        read = await transport.read_terms(role_partition(role, bench.partitions))
    last = None
    for record in read.records:
        key = decode_term_key(record.key)
        if key.role != role or not record.value:
            continue
        if key.kind == TermKind.CLAIM and key.member == member:
            last = decode_claim(record.value).claimed_at
        elif key.kind == TermKind.HEARTBEAT:
            heartbeat = decode_heartbeat(record.value)
            if heartbeat.member == member:
                last = heartbeat.sent_at
    return None if last is None else last + int(bench.timing.lease * 1000)


def etcd_lease_deadline(events: list[dict[str, Any]], crash: float) -> float | None:
    """When the etcd server expires the killed leader's lease: its last grant or
    keep-alive answered before `crash`, renewed by the server between the request
    (``sent``) and the answer (``t``), taken at the midpoint, + the TTL it answered."""
    renewals = [e for e in events if e.get("event") in ("session", "renewed")
                and e["t"] <= crash]
    if not renewals:
        return None
    last = max(renewals, key=lambda e: e["t"])
    return (last["sent"] + last["t"]) / 2 + last["ttl"] * 1000


DEADLINES = {
    "epoch": "the deadline of the killed leader's last committed lease record (the standby "
             "takes over once it has passed)",
    "term": "the killed leader's last heartbeat (or claim) on the terms topic, by its "
            "sent_at, + the election timeout (the standby claims once it has passed)",
    "etcd": "the server's lease expiry: the last keep-alive (or grant) answered, at the "
            "midpoint of its round trip, + the TTL the server answered",
    "zookeeper": "the server's session expiry: the last answer the server sent the session "
                 "(cons lresp, read while the leader is stopped, before the SIGKILL) + "
                 "the negotiated timeout, rounded up to the next tick as its expiry queue "
                 "does",
}


async def _zookeeper_expiry(bench: Bench, session: str) -> float | None:
    """The server's expiry of `session` on the wall clock, or None when `cons` does not
    list it."""
    from bench.services import zookeeper_sessions

    def read() -> float | None:
        found = zookeeper_sessions(bench.zookeeper).get(session)
        if found is None:
            return None
        # The server's clock is CLOCK_MONOTONIC; this process reads both clocks.
        offset = time.time() * 1000 - time.monotonic() * 1000
        return found.expiry(bench.zookeeper_tick_ms) + offset
    return await asyncio.to_thread(read)


async def crash_failover(bench: Bench) -> None:
    """SIGSTOP, then SIGKILL, of the leader to the new leader's 'leading', every system
    alike (its first write as a second row); the overshoot past the deadline each system
    enforces, for all of them."""
    systems = bench.contenders()
    output = f"bench-crash-{bench.run_id}"
    await bench.create_topic(output, 1)
    to_leading: dict[str, list[float]] = {s: [] for s in systems}
    first_write: dict[str, list[float]] = {s: [] for s in systems}
    overshoot: dict[str, list[float]] = {s: [] for s in systems}
    overshoot_write: dict[str, list[float]] = {s: [] for s in systems}
    no_deadline: dict[str, int] = dict.fromkeys(systems, 0)

    async def trial(system: str, i: int) -> None:
        role = bench.role("crash", f"{system}-{i}")
        a, b = await bench.pair(system, role, output)
        try:
            await asyncio.sleep(random.uniform(0, bench.timing.renew))
            # Stopped first, so the server's view of a ZooKeeper session can be read
            # while its connection is still open (a killed one's is gone from cons);
            # stopped, the leader does nothing more, so the crash is timed from here.
            t_crash = now_ms()
            a.signal(signal.SIGSTOP)
            zk_expiry = None
            if system == "zookeeper":
                ready = a.find("ready")
                assert ready is not None, "a zookeeper member reports its session once ready"
                zk_expiry = await _zookeeper_expiry(bench, ready["session"])
            a.kill()
            leading = await wait(b, "leading", bench.timing.lease * 4 + 30)
            wrote = await wait(b, "wrote", 30)
            to_leading[system].append(leading["t"] - t_crash)
            first_write[system].append(wrote["t"] - t_crash)
            fencing = fencing_of(system)
            deadline: float | None
            if fencing is not None:
                found = await (_last_krabka_deadline(bench, role, "a") if fencing == "epoch"
                               else _last_term_deadline(bench, role, "a"))
                deadline = None if found is None else float(found)
            elif system == "etcd":
                deadline = etcd_lease_deadline(a.events, t_crash)
            else:
                deadline = zk_expiry
            if deadline is None:
                no_deadline[system] += 1
            else:
                overshoot[system].append(leading["t"] - deadline)
                overshoot_write[system].append(wrote["t"] - deadline)
        finally:
            await stop(a, b)

    failures = await alternate(bench, "crash-failover", systems, trial)
    start = ("SIGSTOP of the leader process (at a random phase of the renew interval), "
             "SIGKILL right after")
    for system in systems:
        fencing = fencing_of(system)
        bench.add(Result(
            "crash-failover", system, "ms", to_leading[system],
            bench.config(start=start, end=LEADING, standbys=1, fencing=fencing),
            extra={"failures": failures[system]}))
        bench.add(Result(
            "crash-failover", system, "ms", first_write[system],
            bench.config(start=start, end=_first_write(system), standbys=1, fencing=fencing),
            metric="first-write"))
    for system in systems:
        bench.add(Result(
            "deadline-overshoot", system, "ms", overshoot[system],
            bench.config(start=DEADLINES[fencing_of(system) or system], end=LEADING,
                         fencing=fencing_of(system)),
            extra={"first_write_ms": overshoot_write[system],
                   "trials_without_a_deadline": no_deadline[system]}))


# --------------------------------------------------------------------------- zombie-writes


@dataclass
class _TermVerdicts:
    """What a `TermFilter` reader made of one trial's zombie records (term mode)."""

    dropped: int
    passed_after_barrier: int


def _filter_zombie(records: list[OutputRecord], topic: str, role: str, member: str,
                   successor_term: int) -> _TermVerdicts:
    """Read the whole partition through a `TermFilter`, in offset order, as a reader
    from the start does; count the zombie's records it dropped, and those it passed
    after the successor's barrier (term mode promises none)."""
    from krabka import TermFilter
    from krabka.format.terms import TERM_HEADER, decode_term_header

    reader = TermFilter(fenced_topics=[topic])
    barrier_seen = False
    dropped = passed_after_barrier = 0
    for record in records:
        verdict = reader.admit(topic, 0, record.headers)
        if verdict == "barrier":
            stamp = decode_term_header(dict(record.headers)[TERM_HEADER])
            barrier_seen = barrier_seen or (stamp.role == role and stamp.term >= successor_term)
        if record.value is None or record.value.get("member") != member:
            continue
        if verdict == "drop":
            dropped += 1
        elif verdict == "pass" and barrier_seen:
            passed_after_barrier += 1
    return _TermVerdicts(dropped, passed_after_barrier)


async def zombie_writes(bench: Bench) -> None:
    """SIGSTOP the leader past the lease, SIGCONT after the standby leads: count its
    writes the shared output accepted after the new leader was elected; in term mode
    also what a `TermFilter` reader did with them."""
    await _zombies(bench, "zombie-writes", in_flight=False)


async def zombie_in_flight(bench: Bench) -> None:
    """zombie-writes with the pause inside a write: after the leader's last check of
    its leadership, before the record reaches the broker (the worker stops itself)."""
    await _zombies(bench, "zombie-in-flight", in_flight=True)


PAUSES = {
    False: "SIGSTOP (at a random phase of the renew interval) until the standby leads, "
           "+0.3 s, then SIGCONT",
    True: "the worker stops itself (SIGSTOP) inside its next write, after the leader's last "
          "check (krabka: the tenure's; peers: the recipe's) and before the record goes to "
          "the broker (epoch mode: before the commit); SIGCONT 0.3 s after the standby leads",
}


async def _zombies(bench: Bench, figure: str, *, in_flight: bool) -> None:
    systems = bench.contenders()
    outputs = {s: f"bench-{figure}-{s}-{bench.run_id}" for s in systems}
    for topic in outputs.values():
        await bench.create_topic(topic, 1, log_append_time=True)
    counts: dict[str, list[float]] = {s: [] for s in systems}
    notice: dict[str, list[float]] = {s: [] for s in systems}
    never_noticed: dict[str, int] = dict.fromkeys(systems, 0)
    dropped: dict[str, list[float]] = {s: [] for s in systems}
    passed_after_barrier: dict[str, list[float]] = {s: [] for s in systems}

    async def trial(system: str, i: int) -> None:
        role = bench.role(figure, f"{system}-{i}")
        member = f"a{i}"
        a, b = await bench.pair(system, role, outputs[system], members=(member, f"b{i}"))
        try:
            await asyncio.sleep(random.uniform(0, bench.timing.renew))
            if in_flight:
                a.signal(signal.SIGUSR2)
                await wait(a, "pausing", 10)
            else:
                a.signal(signal.SIGSTOP)
            leading = await wait(b, "leading", bench.timing.lease * 4 + 30)
            await asyncio.sleep(0.3)
            t_cont = now_ms()
            a.signal(signal.SIGCONT)
            try:
                lost = await wait(a, "lost", 10)
                notice[system].append(lost["t"] - t_cont)
            except TimeoutError:
                never_noticed[system] += 1
            await asyncio.sleep(0.3)
        finally:
            await stop(a, b)
        records = await read_output(bench.bootstrap, outputs[system])
        zombies = {r.value.get("seq") for r in records
                   if r.value is not None and r.value.get("member") == member
                   and r.timestamp >= int(leading["t"])}
        counts[system].append(float(len(zombies)))
        if fencing_of(system) == "term":
            verdicts = _filter_zombie(records, outputs[system], role, member, leading["term"])
            dropped[system].append(float(verdicts.dropped))
            passed_after_barrier[system].append(float(verdicts.passed_after_barrier))

    failures = await alternate(bench, figure, systems, trial)
    writers = {
        "epoch": "guarded transactions through the role's fenced producer",
        "term": "term-mode transactions: the role's records stamped with its term, through "
                "an idempotent (not transactional) producer, after the term's barrier",
    }
    for system in systems:
        fencing = fencing_of(system)
        values = counts[system]
        bench.add(Result(
            figure, system, "writes", values,
            bench.config(pause=PAUSES[in_flight],
                         counted="old leader's records committed to the output topic with "
                                 "a LogAppendTime at or after the new leader's 'leading'",
                         write_interval_s=bench.write_interval, fencing=fencing,
                         writer=writers.get(fencing or "",
                                            "a plain idempotent producer, each write after "
                                            "the recipe's own leadership check")),
            metric="accepted",
            extra={"trials_with_zombie_writes": sum(1 for v in values if v > 0),
                   "failures": failures[system]}))
        if fencing == "term":
            bench.add(Result(
                figure, system, "writes", dropped[system],
                bench.config(reader="krabka.TermFilter over the whole partition in "
                                    "offset order, the output topic given as fenced",
                             counted="old leader's data records the filter dropped (stale "
                                     "term)", fencing=fencing),
                metric="dropped",
                extra={"trials_with_drops": sum(1 for v in dropped[system] if v > 0)}))
            bench.add(Result(
                figure, system, "writes", passed_after_barrier[system],
                bench.config(reader="krabka.TermFilter, as for dropped",
                             counted="old leader's data records the filter passed after the "
                                     "new term's barrier (term mode's guarantee: none)",
                             fencing=fencing),
                metric="passed-after-barrier"))
        bench.add(Result(
            figure, system, "ms", notice[system],
            bench.config(start="SIGCONT", end="the old leader reports it lost the role",
                         fencing=fencing),
            metric="notice", extra={"never_noticed_within_10s": never_noticed[system]}))

"""The figures that compare elections: codec, authority-check, graceful-handover,
crash-failover (+ deadline-overshoot) and zombie-writes.

Every comparison alternates systems trial by trial in one invocation. Each
trial of the process figures uses a fresh role (a fresh etcd prefix,
ZooKeeper path) with exactly one leader and one standby, so the standby is
first in line in every system.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

from bench.context import Bench, now_ms, read_output, stop, wait
from bench.stats import Result

# --------------------------------------------------------------------------- helpers


async def alternate(bench: Bench, figure: str, systems: list[str],
                    trial: Callable[[str, int], Awaitable[None]]) -> dict[str, list[str]]:
    """Run `trial(system, i)` for i in range(trials), systems alternating; failures kept."""
    failures: dict[str, list[str]] = {s: [] for s in systems}
    for i in range(bench.trials):
        order = systems if i % 2 == 0 else list(reversed(systems))
        for system in order:
            started = time.monotonic()
            try:
                await asyncio.wait_for(trial(system, i), timeout=180)
            except Exception as exc:
                failures[system].append(f"trial {i}: {exc!r}"[:400])
                print(f"  [{figure}] {system} trial {i} failed: {exc!r}"[:600], flush=True)
                traceback.print_exc(limit=3)
            else:
                print(f"  [{figure}] {system} trial {i + 1}/{bench.trials} "
                      f"({time.monotonic() - started:.1f} s)", flush=True)
    return failures


# --------------------------------------------------------------------------- codec


def _codec_inputs(count: int) -> tuple[list[Any], list[Any]]:
    from coordination import Lease, lease_key

    now = int(time.time() * 1000)
    keys = [lease_key(f"acme.role-{i:05d}") for i in range(count)]
    leases = [Lease(f"worker-{i % 7}.example:6066", 4000 + i, i % 32767, now, now + 3000)
              for i in range(count)]
    return keys, leases


async def codec(bench: Bench) -> None:
    """Records (key + lease value) encoded and decoded per second; orjson as a yardstick."""
    import orjson

    from coordination import decode_key, decode_lease, encode_key, encode_lease

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


async def authority_check(bench: Bench) -> None:
    """A third party asks who leads: DescribeTransactions vs etcd Range vs ZK children+get."""
    from coordination import describe_leadership
    from coordination.kafka import KafkaTransport

    systems = bench.active()
    role = bench.role("authority", "x")
    output = f"bench-authority-{bench.run_id}"
    await bench.create_topic(output, 1)
    leaders = {}
    try:
        for system in systems:
            leaders[system] = bench.worker(system, role, "a", output, interval=1.0)
        leading = {s: await wait(c, "leading", 60) for s, c in leaders.items()}
        calls: dict[str, Callable[[], Awaitable[Any]]] = {}
        closers: list[Callable[[], Any]] = []
        transport = None
        if "krabka" in systems:
            transport = KafkaTransport(bench.bootstrap, topic=bench.state_topic)
            await transport.start()
            from coordination import FencingToken

            token = FencingToken(leading["krabka"]["producer_id"],
                                 leading["krabka"]["producer_epoch"])

            async def krabka() -> None:
                status = await describe_leadership(transport, role)
                if not status.authoritative(token):
                    raise AssertionError(f"krabka: {token} not authoritative: {status}")
            calls["krabka"] = krabka
        if "etcd" in systems:
            from bench.peers import EtcdElection

            reader = EtcdElection(bench.etcd, f"/bench/{role}", bench.timing.lease,
                                  bench.timing.renew)
            closers.append(reader.client.close)

            async def etcd() -> None:
                found = reader.leader()
                if found is None or found[1] != b"a":
                    raise AssertionError(f"etcd: leader {found}")
            calls["etcd"] = etcd
        if "zookeeper" in systems:
            from bench.peers import ZkElection

            zk = ZkElection(bench.zookeeper, f"/bench/{role}", bench.timing.lease)
            zk.start()
            closers.append(zk.close)

            async def zookeeper() -> None:
                if zk.leader() != b"a":
                    raise AssertionError("zookeeper: leader is not 'a'")
            calls["zookeeper"] = zookeeper
        rounds = bench.trials * 20
        samples: dict[str, list[float]] = {s: [] for s in calls}
        for call in calls.values():
            for _ in range(20):
                await call()
        for i in range(rounds):
            for system in (list(calls) if i % 2 == 0 else list(reversed(calls))):
                t0 = time.perf_counter()
                await calls[system]()
                samples[system].append((time.perf_counter() - t0) * 1000)
        what = {"krabka": "describe_leadership: DescribeTransactions to the cached "
                          "transaction coordinator (1 round trip) + authoritative(token)",
                "etcd": "Election.Leader: one Range, prefix, sorted by create revision, "
                        "limit 1 (etcd3 gRPC client)",
                "zookeeper": "get_children(election path) + get(lowest child) "
                             "(2 round trips, kazoo)"}
        for system, values in samples.items():
            bench.add(Result("authority-check", system, "ms", values,
                             bench.config(calls=rounds, warmup=20, what=what[system],
                                          note="sequential calls from one client, "
                                               "alternating systems")))
        if transport is not None:
            await transport.close()
        for close in closers:
            close()
    finally:
        await stop(*leaders.values())


# --------------------------------------------------------------------------- graceful-handover


async def graceful_handover(bench: Bench) -> None:
    """resign() on the leader to the new leader's first committed write (peers: leading)."""
    systems = bench.active()
    output = f"bench-handover-{bench.run_id}"
    await bench.create_topic(output, 1)
    handover: dict[str, list[float]] = {s: [] for s in systems}
    to_leading: dict[str, list[float]] = {s: [] for s in systems}
    resign_call: dict[str, list[float]] = {s: [] for s in systems}

    async def trial(system: str, i: int) -> None:
        a, b = await bench.pair(system, bench.role("handover", f"{system}-{i}"), output)
        try:
            await asyncio.sleep(random.uniform(0, bench.timing.renew))
            a.signal(signal.SIGUSR1)
            resigning = await wait(a, "resigning", 15)
            leading = await wait(b, "leading", 30)
            end = await wait(b, "wrote", 30) if system == "krabka" else leading
            resigned = await wait(a, "resigned", 15)
            handover[system].append(end["t"] - resigning["t"])
            to_leading[system].append(leading["t"] - resigning["t"])
            resign_call[system].append(resigned["t"] - resigning["t"])
        finally:
            await stop(a, b)

    failures = await alternate(bench, "graceful-handover", systems, trial)
    for system in systems:
        end = ("the new leader's first committed guarded write" if system == "krabka"
               else "the new leader's 'became leader'")
        bench.add(Result(
            "graceful-handover", system, "ms", handover[system],
            bench.config(start="the old leader calls resign", end=end,
                         write_interval_s=bench.write_interval,
                         tail_wait_ms=bench.tail_wait_ms if system == "krabka" else None),
            extra={"to_leading_ms": to_leading[system],
                   "resign_call_ms": resign_call[system], "failures": failures[system]}))


# --------------------------------------------------------------------------- crash-failover


async def _last_krabka_deadline(bench: Bench, role: str, member: str) -> int | None:
    from coordination import Kind, decode_key, decode_lease, role_partition
    from coordination.kafka import KafkaTransport

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


async def crash_failover(bench: Bench) -> None:
    """SIGKILL of the leader to the new leader's first committed write (peers: leading)."""
    systems = bench.active()
    output = f"bench-crash-{bench.run_id}"
    await bench.create_topic(output, 1)
    failover: dict[str, list[float]] = {s: [] for s in systems}
    to_leading: dict[str, list[float]] = {s: [] for s in systems}
    overshoot: dict[str, list[float]] = {s: [] for s in systems}
    overshoot_leading: dict[str, list[float]] = {s: [] for s in systems}
    ttl_ms = bench.timing.lease * 1000

    async def trial(system: str, i: int) -> None:
        role = bench.role("crash", f"{system}-{i}")
        a, b = await bench.pair(system, role, output)
        try:
            await asyncio.sleep(random.uniform(0, bench.timing.renew))
            t_kill = now_ms()
            a.kill()
            leading = await wait(b, "leading", bench.timing.lease * 4 + 30)
            end = await wait(b, "wrote", 30) if system == "krabka" else leading
            failover[system].append(end["t"] - t_kill)
            to_leading[system].append(leading["t"] - t_kill)
            deadline: float | None = None
            if system == "krabka":
                found = await _last_krabka_deadline(bench, role, "a")
                deadline = None if found is None else float(found)
            elif system == "etcd":
                renewals = [e["t"] for e in a.events if e.get("event") == "renewed"
                            and e["t"] <= t_kill]
                deadline = (max(renewals) if renewals else a.find("leading")["t"]) + ttl_ms
            if deadline is not None:
                overshoot[system].append(end["t"] - deadline)
                overshoot_leading[system].append(leading["t"] - deadline)
        finally:
            await stop(a, b)

    failures = await alternate(bench, "crash-failover", systems, trial)
    for system in systems:
        end = ("the new leader's first committed guarded write" if system == "krabka"
               else "the new leader's 'became leader'")
        bench.add(Result(
            "crash-failover", system, "ms", failover[system],
            bench.config(start="SIGKILL of the leader process (at a random phase of the "
                               "renew interval)", end=end, standbys=1),
            extra={"to_leading_ms": to_leading[system], "failures": failures[system]}))
    for system in systems:
        if system == "zookeeper":
            bench.skip_result("deadline-overshoot", system, "ms",
                              "the session deadline is the server's (last packet heard), "
                              "which kazoo does not expose")
            continue
        deadline = ("the deadline of the last committed lease record of the killed leader"
                    if system == "krabka" else
                    "the killed leader's last answered keep-alive + TTL")
        bench.add(Result(
            "deadline-overshoot", system, "ms", overshoot[system],
            bench.config(start=deadline,
                         end="the failover end point of crash-failover"),
            extra={"to_leading_ms": overshoot_leading[system]}))


# --------------------------------------------------------------------------- zombie-writes


async def zombie_writes(bench: Bench) -> None:
    """SIGSTOP the leader past the lease, SIGCONT after the standby leads: count its
    writes the shared output accepted after the new leader was elected."""
    systems = bench.active()
    outputs = {s: f"bench-zombie-{s}-{bench.run_id}" for s in systems}
    for topic in outputs.values():
        await bench.create_topic(topic, 1, log_append_time=True)
    counts: dict[str, list[float]] = {s: [] for s in systems}
    notice: dict[str, list[float]] = {s: [] for s in systems}
    never_noticed: dict[str, int] = dict.fromkeys(systems, 0)

    async def trial(system: str, i: int) -> None:
        role = bench.role("zombie", f"{system}-{i}")
        member = f"a{i}"
        a, b = await bench.pair(system, role, outputs[system], members=(member, f"b{i}"))
        try:
            await asyncio.sleep(random.uniform(0, bench.timing.renew))
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
        zombies = {value.get("seq") for ts, value in records
                   if value.get("member") == member and ts >= int(leading["t"])}
        counts[system].append(float(len(zombies)))

    failures = await alternate(bench, "zombie-writes", systems, trial)
    for system in systems:
        guard = ("guarded transactions through the role's fenced producer" if system == "krabka"
                 else "a plain idempotent producer, each write after the recipe's own "
                      "leadership check")
        values = counts[system]
        bench.add(Result(
            "zombie-writes", system, "writes", values,
            bench.config(pause="SIGSTOP until the standby leads, +0.3 s, then SIGCONT",
                         counted="old leader's records committed to the output topic with "
                                 "a LogAppendTime at or after the new leader's 'leading'",
                         write_interval_s=bench.write_interval, writer=guard),
            metric="accepted",
            extra={"trials_with_zombie_writes": sum(1 for v in values if v > 0),
                   "failures": failures[system]}))
        bench.add(Result(
            "zombie-writes", system, "ms", notice[system],
            bench.config(start="SIGCONT", end="the old leader reports it lost the role"),
            metric="notice", extra={"never_noticed_within_10s": never_noticed[system]}))

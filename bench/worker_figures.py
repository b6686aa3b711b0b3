"""The whole Faust worker measured, each figure beside a raw aiokafka (or aiohttp) baseline.

- ``worker-fold``: records/s of one worker folding a pre-filled state topic
  (``bench.fold.fill``: registrations and leases of many roles, per workload
  of ``--fold-workloads``: contiguous, or interleaved in transactions) into its
  RocksDB table, changelog and events, exactly-once: from the spawn of the
  process to ``GET /ready`` showing a fold lag of 0 on every partition and
  the group's committed offsets past every partition's last record, minus the
  time a worker of a new group on an empty state topic takes to be ready
  (same trial). Baselines: ``aiokafka-same-work``, one aiokafka exactly-once
  pipeline doing the fold's work (`bench.fold.same_work`), and
  ``aiokafka-raw``, fold-throughput's own read_committed consume-and-decode of
  the same topic (`bench.fold.consume`).
- ``worker-recovery``: a role_state changelog written as a worker's commits
  leave it (10 values of each role, in transactions); per trial a worker
  with an empty data directory, then the same worker again with the data
  directory it left, each from the spawn to ``GET /ready`` answering 200 and
  ``GET /roles/`` listing every role as the first recovered worker did, and
  each recovery's own time from its start to its end, as the worker logs it
  (``:phase``, ``:kept-phase``). Baselines ``aiokafka-raw``: one
  read_committed consumer reading the changelog to its end, keeping the last
  value of each key (a restore's least work), in the bench's process and in
  a process of its own from spawn to exit (``:spawned``).
- ``event-latency``: from a lease record's commit (a transactional producer
  of the bench) to the worker's ``elected`` event being read by a
  read_committed subscriber of the events topic, per commit interval
  (``COORDINATION_COMMIT_INTERVAL``). Baseline ``aiokafka-raw``: the same
  subscriber reading the lease record itself off the state topic.
- ``webview-latency``: ``GET /roles/{role}/`` and ``GET /roles/`` of one
  worker holding 1 000 roles, sequential requests over one keep-alive aiohttp
  session. Baseline ``aiohttp-static``: `bench.static_web` answering the same
  bodies from memory.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import sys
import time
from typing import Any

from bench import fold, procs
from bench.app_worker import FOLD_PROBE_INTERVAL, AppWorker, WorkerGroup, free_port, until
from bench.context import Bench
from bench.stats import Result

PARTITIONS = fold.PARTITIONS
FOLD_TIMEOUT = 1800.0
"""Seconds a worker may take to fold its state topic before the trial fails."""
RECOVERY_VERSIONS = 10
"""Values per role in worker-recovery's changelog: 10 000 roles make 100 000 records."""
READY_TIMEOUT = 600.0
"""Seconds a worker may take from its spawn to ready with its roles listed. A
10 000-role recovery takes about 13 s; a trial that never got there (a worker
ready with roles missing, which no wait mends) cost the full run 30 minutes
at the fold's bound."""


def _session() -> Any:
    import aiohttp

    return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))


def _rows(body: Any) -> dict[str, dict[str, Any]] | None:
    """``GET /roles/``'s rows by role, without the status (it is computed at the read)."""
    if not isinstance(body, dict) or not isinstance(body.get("roles"), list):
        return None
    return {row["role"]: {k: v for k, v in row.items() if k != "status"}
            for row in body["roles"]}


async def _folded(bench: Bench, group: WorkerGroup, session: Any,
                  after: dict[int, int] | None = None) -> tuple[AppWorker, float]:
    """A new worker of `group` and the seconds it took to fold its state topic to the
    end (`AppWorker.folded_to_end`'s `after`)."""
    worker = group.start()
    try:
        return worker, await worker.folded_to_end(session, FOLD_TIMEOUT, after)
    except BaseException:
        await worker.stop()
        raise


# --------------------------------------------------------------------------- worker-fold


async def worker_fold(bench: Bench) -> None:
    records = bench.worker_records or (10_000 if bench.quick else 100_000)
    trials = 1 if bench.quick else max(1, min(bench.trials, 3))
    for workload in bench.fold_workloads:
        await _worker_fold(bench, workload, records, trials)


async def _worker_fold(bench: Bench, workload: str, records: int, trials: int) -> None:
    full_topic = f"bench-worker-fold-{workload}-{bench.run_id}"
    empty_topic = f"bench-worker-empty-{workload}-{bench.run_id}"
    first = WorkerGroup(bench, f"fold-{workload}-full-0", PARTITIONS, state_topic=full_topic,
                        probe_interval=FOLD_PROBE_INTERVAL)
    first.create_topics()
    filled, after = await fold.fill(bench, full_topic, records, workload=workload)
    roles = max(1, records // 20)
    systems = ("aiokafka-raw", "aiokafka-same-work", "krabka")
    rates: dict[str, list[float]] = {system: [] for system in systems}
    startups: list[float] = []
    to_end: list[float] = []
    async with _session() as session:
        for i in range(trials):
            for system in systems[i % 3:] + systems[:i % 3]:
                if system == "aiokafka-raw":
                    started = time.perf_counter()
                    count = await fold.consume(bench, full_topic, fold.decode_only)
                    rates[system].append(count / (time.perf_counter() - started))
                    continue
                if system == "aiokafka-same-work":
                    count, took = await fold.same_work(
                        bench, full_topic, f"bench-same-work-{workload}-{bench.run_id}-{i}")
                    rates[system].append(count / took)
                    continue
                empty = WorkerGroup(bench, f"fold-{workload}-empty-{i}", PARTITIONS,
                                    state_topic=empty_topic, probe_interval=FOLD_PROBE_INTERVAL)
                empty.create_topics()
                # Ready, listing no role: the process start, imports, group join
                # and first probe. Not `folded_to_end`: on an empty topic the
                # worker reports a fold lag for every partition only 10 to 20 s
                # after it is ready (it has fetched nothing to learn the ends
                # from), which once made this baseline longer than the fold.
                worker = empty.start()
                try:
                    startup = await _recovered(worker, session, {})
                finally:
                    await worker.stop()
                full = first if i == 0 else WorkerGroup(
                    bench, f"fold-{workload}-full-{i}", PARTITIONS, state_topic=full_topic,
                    probe_interval=FOLD_PROBE_INTERVAL)
                if full is not first:
                    full.create_topics()
                worker, took = await _folded(bench, full, session, after)
                try:
                    status, body = await worker.get(session, "/roles/")
                    listed = _rows(body) or {}
                    if len(listed) != roles:
                        _, ready = await worker.get(session, "/ready")
                        raise RuntimeError(f"worker-fold: the worker lists {len(listed)} roles "
                                           f"after folding, not {roles} ({status}: "
                                           f"{str(body)[:300]}; /ready: {ready})")
                finally:
                    await worker.stop()
                startups.append(startup)
                to_end.append(took)
                rates[system].append(filled / max(took - startup, 1e-3))
            same = rates["aiokafka-same-work"][-1]
            print(f"  [worker-fold] {workload} trial {i + 1}/{trials}: krabka "
                  f"{rates['krabka'][-1]:.0f}, same-work {same:.0f}, raw "
                  f"{rates['aiokafka-raw'][-1]:.0f} records/s; krabka/same-work "
                  f"{rates['krabka'][-1] / same:.2f}", flush=True)
    config = bench.config(records=filled, roles=roles, partitions=PARTITIONS, trials_run=trials,
                          workload=workload)
    bench.add(Result("worker-fold", "krabka", "records/s", rates["krabka"],
                     {**config, "what": "records / (spawn to fold lag 0 on every partition, "
                                        "minus an empty state topic's spawn to ready)"},
                     higher_is_better=True, metric=workload,
                     extra={"startup_s": startups, "to_end_s": to_end}))
    bench.add(Result("worker-fold", "aiokafka-raw", "records/s", rates["aiokafka-raw"],
                     {**config, "what": "fold-throughput's read_committed consume + decode"},
                     higher_is_better=True, metric=workload))
    bench.add(Result("worker-fold", "aiokafka-same-work", "records/s",
                     rates["aiokafka-same-work"],
                     {**config, "what": "bench.fold.same_work: one aiokafka exactly-once "
                                        "pipeline, the same chunked fold, changelog, events "
                                        "and offsets in one transaction per chunk"},
                     higher_is_better=True, metric=workload))
    bench.add(Result("worker-fold", "krabka", "s", startups, config,
                     metric=f"startup-{workload}"))


# --------------------------------------------------------------------------- worker-recovery


async def worker_recovery(bench: Bench) -> None:
    roles = bench.recovery_roles or (1_000 if bench.quick else 10_000)
    versions = RECOVERY_VERSIONS
    trials = 1 if bench.quick else max(1, min(bench.trials, 3))
    group = WorkerGroup(bench, "recovery", PARTITIONS)
    group.create_topics()
    written = await _write_changelog(bench, group.changelog, roles, versions)
    samples: dict[str, list[float]] = {name: [] for name in (
        "empty", "empty-phase", "kept", "kept-phase", "raw", "raw-spawned", "startup")}
    read: dict[str, list[int]] = {"empty": [], "kept": []}
    reference: dict[str, dict[str, Any]] | None = None
    async with _session() as session:
        for i in range(trials):
            order = ["aiokafka-raw", "krabka"] if i % 2 == 0 else ["krabka", "aiokafka-raw"]
            for system in order:
                if system == "aiokafka-raw":
                    samples["raw"].append(await _raw_restore(bench, group.changelog, roles))
                    samples["raw-spawned"].append(
                        await _raw_restore_spawned(bench, group.changelog, roles))
                    continue
                # Without local state: a data directory of its own, empty.
                worker = group.start()
                try:
                    if reference is None:
                        reference = await _recovered_roles(worker, session, roles, versions)
                        samples["empty"].append(time.perf_counter() - worker.started)
                    else:
                        samples["empty"].append(await _recovered(worker, session, reference))
                finally:
                    await worker.stop()
                phase, records = _recovery_logged(worker)
                samples["empty-phase"].append(phase)
                read["empty"].append(records)
                # The same worker again, with the data directory it left.
                again = group.start(data_dir=worker.data_dir)
                try:
                    samples["kept"].append(await _recovered(again, session, reference))
                finally:
                    await again.stop()
                phase, records = _recovery_logged(again)
                samples["kept-phase"].append(phase)
                read["kept"].append(records)
                # A worker of a new group with nothing to recover: what the process
                # start, the group join and the first probe cost by themselves.
                empty = WorkerGroup(bench, f"recovery-empty-{i}", PARTITIONS)
                empty.create_topics()
                worker = empty.start()
                try:
                    samples["startup"].append(await _recovered(worker, session, {}))
                finally:
                    await worker.stop()
            print(f"  [worker-recovery] trial {i + 1}/{trials}: empty data directory "
                  f"{samples['empty'][-1]:.2f} s (recovery {samples['empty-phase'][-1]:.2f} s, "
                  f"{read['empty'][-1]} records), kept {samples['kept'][-1]:.2f} s (recovery "
                  f"{samples['kept-phase'][-1]:.3f} s, {read['kept'][-1]} records); raw "
                  f"{samples['raw'][-1]:.2f} s, spawned {samples['raw-spawned'][-1]:.2f} s",
                  flush=True)
    config = bench.config(roles=roles, changelog_records=written, versions_per_role=versions,
                          partitions=PARTITIONS, trials_run=trials)
    spawn = "spawn to /ready 200 and GET /roles/ equal to the first recovered worker's"
    bench.add(Result("worker-recovery", "krabka", "s", samples["empty"],
                     {**config, "what": f"{spawn}, empty data directory"},
                     extra={"records_read": read["empty"]}))
    bench.add(Result("worker-recovery", "krabka", "s", samples["empty-phase"],
                     {**config, "what": "the recovery, from its start to its end as the worker "
                                        "logs it, empty data directory"},
                     metric="phase", extra={"records_read": read["empty"]}))
    bench.add(Result("worker-recovery", "krabka", "s", samples["kept"],
                     {**config, "what": f"{spawn}, the data directory the worker before left"},
                     metric="kept", extra={"records_read": read["kept"]}))
    bench.add(Result("worker-recovery", "krabka", "s", samples["kept-phase"],
                     {**config, "what": "the recovery, from its start to its end as the worker "
                                        "logs it, the data directory the worker before left"},
                     metric="kept-phase", extra={"records_read": read["kept"]}))
    bench.add(Result("worker-recovery", "aiokafka-raw", "s", samples["raw"],
                     {**config, "what": "read_committed consumer in the bench's process: the "
                                        "role_state changelog to its end, last value per key"}))
    bench.add(Result("worker-recovery", "aiokafka-raw", "s", samples["raw"],
                     {**config, "what": "the same read, the phase to compare with"},
                     metric="phase"))
    bench.add(Result("worker-recovery", "aiokafka-raw", "s", samples["raw-spawned"],
                     {**config, "what": "the same read in a process of its own "
                                        "(bench.raw_restore), spawn to exit"},
                     metric="spawned"))
    bench.add(Result("worker-recovery", "krabka", "s", samples["startup"],
                     {**config, "what": "spawn to /ready 200 on a new group with nothing "
                                        "to recover"},
                     metric="startup"))


async def _write_changelog(bench: Bench, topic: str, roles: int, versions: int) -> int:
    """`versions` values of each of `roles` roles in the role_state changelog, as a
    worker's exactly-once commits leave it (committed transactions, the last value
    of each role last); returns the records written. The topic is created here, as
    Faust would create it (compacted, `PARTITIONS` partitions)."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from agents.fold import role_value
    from krabka.format.partition import role_partition
    from krabka.rules.state import RoleState

    admin = AIOKafkaAdminClient(bootstrap_servers=bench.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, PARTITIONS, 1,
                                            topic_configs={"cleanup.policy": "compact"})])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bench.bootstrap,
                                transactional_id=f"{topic}-writer", linger_ms=20,
                                max_batch_size=512 * 1024)
    await producer.start()
    written = 0
    try:
        for version in range(versions):
            async with producer.transaction():
                sends = []
                for i in range(roles):
                    role = f"acme.recovered-{i:06d}"
                    partition = role_partition(role, PARTITIONS)
                    value = role_value.RoleValue(RoleState(role=role), partition,
                                                 last_offset=version)
                    sends.append(await producer.send(topic, role_value.encode(value),
                                                     key=role.encode(), partition=partition))
                await asyncio.gather(*sends)
                written += len(sends)
    finally:
        await producer.stop()
    return written


async def _raw_restore(bench: Bench, topic: str, roles: int) -> float:
    """Seconds one read_committed consumer of the bench's process takes to read
    `topic` to its end, keeping the last value of each key."""
    table: dict[bytes, bytes] = {}

    async def keep(messages: list[Any]) -> None:
        for message in messages:
            table[message.key] = message.value
    started = time.perf_counter()
    await fold.consume(bench, topic, keep)
    took = time.perf_counter() - started
    if len(table) != roles:
        raise RuntimeError(f"worker-recovery: the changelog holds {len(table)} roles, "
                           f"not {roles}")
    return took


async def _raw_restore_spawned(bench: Bench, topic: str, roles: int) -> float:
    """Seconds from the spawn of `bench.raw_restore` reading `topic` to its exit."""
    started = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.raw_restore", bench.bootstrap, topic,
        cwd=procs.ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(process.communicate(), READY_TIMEOUT)
    except BaseException:
        process.kill()
        await process.wait()
        raise
    took = time.perf_counter() - started
    if process.returncode != 0 or int(out.split()[1]) != roles:
        raise RuntimeError(f"worker-recovery: bench.raw_restore exited {process.returncode}: "
                           f"{out.decode()!r} {err.decode()[-500:]!r}")
    return took


async def _recovered_roles(worker: AppWorker, session: Any, roles: int,
                           versions: int) -> dict[str, dict[str, Any]]:
    """``GET /roles/`` once the worker is ready listing `roles` roles, each at its last
    value (the offset the writer gave it)."""
    async def listed() -> dict[str, dict[str, Any]] | None:
        status, _ = await worker.get(session, "/ready")
        if status != 200:
            return None
        status, body = await worker.get(session, "/roles/")
        rows = _rows(body) if status == 200 else None
        if rows is None or len(rows) != roles:
            return None
        if any(row.get("offset") != versions - 1 for row in rows.values()):
            return None
        return rows
    return await worker.until(listed, READY_TIMEOUT, "ready with every role at its last value")


RECOVERY_LINE = re.compile(
    r"table recovery complete in ([0-9.]+) s from its start \((\d+) changelog records read\)")


def _recovery_logged(worker: AppWorker) -> tuple[float, int]:
    """The seconds the worker's table recoveries took, from each one's start to its end,
    and the changelog records they read, as the worker logged them (summed: a lone
    worker's start is usually one recovery)."""
    found = RECOVERY_LINE.findall(worker.log.read_text(errors="replace"))
    if not found:
        raise RuntimeError(f"worker-recovery: no recovery logged in {worker.log}")
    return sum(float(s) for s, _ in found), sum(int(n) for _, n in found)


async def _recovered(worker: AppWorker, session: Any,
                     reference: dict[str, dict[str, Any]]) -> float:
    """Seconds from the spawn to ``/ready`` 200 and ``/roles/`` equal to `reference`."""
    seen = "no answer yet"

    async def recovered() -> float | None:
        nonlocal seen
        status, body = await worker.get(session, "/ready")
        if status != 200:
            seen = f"GET /ready {status}: {(body or {}).get('reasons')}"
            return None
        status, body = await worker.get(session, "/roles/")
        rows = _rows(body) if status == 200 else None
        if rows == reference:
            return time.perf_counter() - worker.started
        seen = f"GET /roles/ {status}: {_difference(rows, reference)}"
        return None
    try:
        return await worker.until(recovered, READY_TIMEOUT, "ready with every role recovered")
    except TimeoutError as exc:
        # `until` knows only that the check said no; a failed trial must say why.
        raise TimeoutError(f"{exc}; the last answer: {seen}") from None


def _difference(rows: dict[str, dict[str, Any]] | None,
                reference: dict[str, dict[str, Any]]) -> str:
    """How `rows` differs from `reference`: counts and the first differing role."""
    if rows is None:
        return "no rows"
    missing = reference.keys() - rows.keys()
    extra = rows.keys() - reference.keys()
    differ = sorted(role for role in reference.keys() & rows.keys()
                    if rows[role] != reference[role])
    first = ""
    if differ:
        role = differ[0]
        fields = {key for key in rows[role].keys() | reference[role].keys()
                  if rows[role].get(key) != reference[role].get(key)}
        first = (f"; {role!r} differs in " + ", ".join(
            f"{key}: {rows[role].get(key)!r} (expected {reference[role].get(key)!r})"
            for key in sorted(fields)))
    return (f"{len(missing)} roles missing, {len(extra)} extra, {len(differ)} differ"
            f"{first}")


# --------------------------------------------------------------------------- event-latency


class _Subscriber:
    """A read_committed reader of the events and state topics, from their ends: each
    record's arrival (perf_counter) resolves the future waiting for it."""

    def __init__(self, bench: Bench, group: WorkerGroup) -> None:
        self.bench = bench
        self.group = group
        self.waiting: dict[tuple[str, str], asyncio.Future[float]] = {}
        self.consumer: Any = None
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        # fetch_max_wait_ms bounds how long an empty fetch waits at the broker; a
        # fetch waiting there is answered as soon as a commit makes records readable.
        self.consumer = AIOKafkaConsumer(bootstrap_servers=self.bench.bootstrap,
                                         isolation_level="read_committed",
                                         enable_auto_commit=False, group_id=None,
                                         fetch_max_wait_ms=100)
        await self.consumer.start()
        tps = [TopicPartition(topic, p) for topic in (self.group.events_topic,
                                                      self.group.state_topic)
               for p in range(self.group.partitions)]
        self.consumer.assign(tps)
        await self.consumer.seek_to_end(*tps)
        for tp in tps:
            await self.consumer.position(tp)
        self.task = asyncio.ensure_future(self._read())

    def expect(self, kind: str, role: str) -> asyncio.Future[float]:
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self.waiting[(kind, role)] = future
        return future

    async def _read(self) -> None:
        from krabka.format.records import Kind, decode_key

        while True:
            batch = await self.consumer.getmany(timeout_ms=1000)
            now = time.perf_counter()
            for tp, messages in batch.items():
                for message in messages:
                    if tp.topic == self.group.events_topic:
                        event = json.loads(message.value)
                        seen = (f"event:{event.get('kind')}", str(event.get("role")))
                    else:
                        key = decode_key(message.key)
                        if key.kind != Kind.LEASE:
                            continue
                        seen = ("lease", key.role)
                    future = self.waiting.pop(seen, None)
                    if future is not None and not future.done():
                        future.set_result(now)

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        if self.consumer is not None:
            await self.consumer.stop()


async def event_latency(bench: Bench) -> None:
    from aiokafka import AIOKafkaProducer

    from krabka.format.partition import role_partition
    from krabka.format.records import (
        Lease,
        Registration,
        encode_key,
        encode_lease,
        encode_registration,
        lease_key,
        registration_key,
    )

    intervals = bench.commit_intervals or ([0.2, 1.0] if bench.quick else [0.1, 0.2, 1.0])
    samples = 10 if bench.quick else 100
    member = "bench-latency.example:6066"
    async with _session() as session:
        for interval in intervals:
            group = WorkerGroup(bench, f"latency-{interval:g}", PARTITIONS,
                                commit_interval=interval)
            group.create_topics()
            worker, _ = await _folded(bench, group, session)
            subscriber = _Subscriber(bench, group)
            producer = AIOKafkaProducer(bootstrap_servers=bench.bootstrap, acks="all",
                                        transactional_id=f"{group.app_id}-writer")
            latencies: dict[str, list[float]] = {"krabka": [], "aiokafka-raw": []}
            try:
                await subscriber.start()
                await producer.start()
                for i in range(samples):
                    role = f"bench.latency.{bench.run_id}.{interval:g}.{i}"
                    partition = role_partition(role, PARTITIONS)
                    now = int(time.time() * 1000)
                    raw = subscriber.expect("lease", role)
                    elected = subscriber.expect("event:elected", role)
                    async with producer.transaction():
                        await producer.send(group.state_topic,
                                            encode_registration(Registration(member, now)),
                                            key=encode_key(registration_key(role, member)),
                                            partition=partition)
                        await producer.send(group.state_topic,
                                            encode_lease(Lease(member, 7000 + i, 0, now,
                                                               now + 30_000)),
                                            key=encode_key(lease_key(role)),
                                            partition=partition)
                    committed = time.perf_counter()
                    seen_raw, seen_event = await asyncio.wait_for(
                        asyncio.gather(raw, elected), 60)
                    latencies["aiokafka-raw"].append((seen_raw - committed) * 1000)
                    latencies["krabka"].append((seen_event - committed) * 1000)
                    # The next commit at a random phase of the worker's commit timer.
                    await asyncio.sleep(random.uniform(0, interval))
            finally:
                await producer.stop()
                await subscriber.stop()
                await worker.stop()
            config = bench.config(commit_interval_s=interval, samples=samples,
                                  partitions=PARTITIONS, subscriber_fetch_max_wait_ms=100)
            bench.add(Result("event-latency", "krabka", "ms", latencies["krabka"],
                             {**config, "what": "lease commit to the elected event read by "
                                                "a read_committed subscriber"},
                             metric=f"commit-{interval:g}s"))
            bench.add(Result("event-latency", "aiokafka-raw", "ms", latencies["aiokafka-raw"],
                             {**config, "what": "lease commit to the lease record read by "
                                                "the same subscriber"},
                             metric=f"commit-{interval:g}s"))


# --------------------------------------------------------------------------- webview-latency


async def webview_latency(bench: Bench) -> None:
    roles = 1_000
    requests = {"role": 50, "roles": 10} if bench.quick else {"role": 300, "roles": 60}
    group = WorkerGroup(bench, "webview", PARTITIONS)
    group.create_topics()
    await fold.fill(bench, group.state_topic, roles * 3, leases=1)
    names = [f"acme.fold-{i:06d}" for i in range(roles)]
    latencies: dict[tuple[str, str], list[float]] = {}
    async with _session() as session:
        worker, _ = await _folded(bench, group, session)
        static: procs.Child | None = None
        try:
            _, listing = await worker.get(session, "/roles/")
            if len(_rows(listing) or {}) != roles:
                raise RuntimeError(f"webview-latency: the worker does not list {roles} roles")
            role_body = await _body(session, f"{worker.url}/roles/{names[0]}/")
            roles_body = await _body(session, f"{worker.url}/roles/")
            bodies = bench.folder / "webview"
            bodies.mkdir(exist_ok=True)
            (bodies / "role.json").write_bytes(role_body)
            (bodies / "roles.json").write_bytes(roles_body)
            port = free_port()
            static = procs.python("bench.static_web", str(port), str(bodies / "role.json"),
                                  str(bodies / "roles.json"), name="static-web",
                                  log=bench.folder / "logs" / "static-web.log",
                                  json_lines=False)
            static_url = f"http://127.0.0.1:{port}"
            await until(lambda: _answers(session, f"{static_url}/roles/"), 30,
                        "the static baseline server listening", child=static)
            for system, base in (("krabka", worker.url), ("aiohttp-static", static_url)):
                for endpoint, count in requests.items():
                    samples = latencies.setdefault((system, endpoint), [])
                    for _ in range(count):
                        path = ("/roles/" if endpoint == "roles"
                                else f"/roles/{random.choice(names)}/")
                        started = time.perf_counter()
                        async with session.get(base + path) as answer:
                            await answer.read()
                            if answer.status != 200:
                                raise RuntimeError(f"webview-latency: {base}{path} answered "
                                                   f"{answer.status}")
                        samples.append((time.perf_counter() - started) * 1000)
        finally:
            if static is not None:
                await asyncio.to_thread(static.stop, 10.0)
                procs.forget(static)
            await worker.stop()
    config = bench.config(roles=roles, partitions=PARTITIONS, role_body_bytes=len(role_body),
                          roles_body_bytes=len(roles_body))
    for (system, endpoint), samples in latencies.items():
        what = ("GET /roles/{role}/ (random role)" if endpoint == "role" else "GET /roles/")
        if system == "aiohttp-static":
            what += ", the worker's body answered from memory by bench.static_web"
        bench.add(Result("webview-latency", system, "ms", samples, {**config, "what": what},
                         metric=endpoint))


async def _body(session: Any, url: str) -> bytes:
    async with session.get(url) as answer:
        if answer.status != 200:
            raise RuntimeError(f"webview-latency: {url} answered {answer.status}")
        body: bytes = await answer.read()
        return body


async def _answers(session: Any, url: str) -> bool:
    async with session.get(url) as answer:
        await answer.read()
        return answer.status == 200

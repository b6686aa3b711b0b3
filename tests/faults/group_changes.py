"""Group-change fault runs: real Faust workers joining, stopping and restarting.

A `GroupChangeRun` runs one worker group of ``faust -A tests.faults.group_changes_app
worker`` processes (`ROLE_NAMES`: three user roles; lease 3 s, renewal 1 s,
stagger 0.5 s, 16 partitions, fresh topics from ``deploy/topics.py``) on a
fixed pool of web ports, one member id per port, and drives it through a
script of changes (`KINDS`):

``join``
    start a worker on a free port of the pool while the others run;
``stop-leader`` / ``stop-standby``
    SIGTERM the worker leading the most roles / the fewest (none, when one
    leads none); it must exit with status 0;
``restart``
    SIGTERM the worker leading the most roles, start it again at once;
``restart-late``
    the same, started again only after the consumer group's session timeout
    (`SESSION_TIMEOUT`) has passed, so the group has rebalanced without it;
``kill-restart``
    SIGKILL the worker leading the most roles, start it again at once (same
    port, so the same member id, while its lease is still live and its
    consumer still in the group).

Scaling 1 -> 3 -> 1 is a script of stops and joins (`LONG_SCRIPTS`).

After every change the run waits for the group to **settle**, with a
generous deadline (`SETTLE_WITHIN`): every live worker's role service runs
every role (``/health``) and its member is on every role's roster (the state
topic); exactly one live worker leads each role (``/health``) and it is the
holder of the role's live lease in the state topic; and every live worker's
``GET /roles/`` answers for every role, from every worker (nothing
``unavailable``), with that holder and token. *Time to settle* is from the
change's signal (or start) to that instant. Then it asserts:

1. **No worker exited by itself**: every poll checks that each worker the
   run did not stop is alive; a SIGTERMed worker must exit with status 0.
   Either failure ends the run.
2. **Every role is held again within lease + stagger x members once a
   candidate is available.** A role is *held* while one of its functions
   runs, from its ``start`` line to its ``stop`` line in the shared tenures
   file (CLOCK_MONOTONIC, `tests.faults.group_changes_app`); a SIGKILLed worker's
   functions stop when the run has reaped it. A *leaderless gap* is a
   stretch in which no function of the role runs. A *candidate* is a live
   worker the run is not stopping whose ``/health`` lists the role's runner
   (a sampler thread asks every such worker every `SAMPLE_INTERVAL` s). The
   *charged* part of a gap starts at the later of the gap's start and the
   first sampling round of the run of rounds, lasting to the gap's end,
   that saw a candidate; it must not exceed `LEASE` + `STAGGER` x (size of
   the port pool), the slot of the last-ranked candidate after a lease
   lapses, plus the sampling period before that round (the instant a
   candidate appeared is known only to within one round). So a role may
   legitimately stay vacant while its only candidate is still starting
   (until its first table recovery, docs/app.md), but not once one runs.
3. **No two functions of a role ran at once**: in the tenures file no
   function of a role starts before the previous one has stopped, and
   functions start in tenure order.
4. **The events topic tells the state topic's story**: the ``elected`` and
   ``resigned`` events of ``coordination-leadership-changes`` (read_committed,
   deduped by ``(role, kind, offset)``) are exactly the state topic's tenures
   (the first lease record of each token: role, tenure offset, token,
   member) and its lease tombstones that cleared a lease (with the cleared
   tenure, token and member, at the tombstone's offset); and every function
   that started ran under one of those tenures. The fold may lag a rebalance, so this is polled up
   to `AGREE_WITHIN` s before it counts as a disagreement; a difference already
   reported at an earlier change is reported once and not waited for again.
5. **Every live worker's web view agrees** (part of settling, above).

At the end the history checker (`tests.faults.history`) reads each role's output
partition read_committed against every worker's journal of guarded writes.

Run it: ``python -m tests.faults.group_changes --long`` (2 and 3 workers, the
scripts of `LONG_SCRIPTS`, on a broker it starts, or on
``KAFKA_BOOTSTRAP_SERVERS``); ``tests/faults/test_group_changes.py`` runs a short
script in CI.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from krabka.format.partition import role_partition
from krabka.format.records import Kind, decode_key, decode_lease
from krabka.rules.fold import build_role_state
from krabka.rules.state import Record, RoleState
from tests.app.test_app_harness import ROOT, AppGroup, AppWorker, get_json
from tests.faults.group_changes_app import ROLE_NAMES
from tests.faults.history import attempts_from_journal, check_history
from tests.support.ports import free_port, kafka_port

APP_MODULE = "tests.faults.group_changes_app"
PARTITIONS = 16
LEASE, RENEW, STAGGER = 3.0, 1.0, 0.5
SESSION_TIMEOUT = 6.0
"""The consumer group's session timeout (`AppGroup.env` sets it)."""
SETTLE_WITHIN = 240.0
"""Seconds a change may take to settle: a start waits for its first table
recovery (about 22 s) and a rebalance restarts every worker's (docs/app.md);
generous, on a 2-core machine shared with others."""
AGREE_WITHIN = 60.0
POLL = 0.5
SAMPLE_INTERVAL = 0.2
PROBE_TIMEOUT = 1.0
STOP_TIMEOUT = 40.0

KINDS = ("join", "stop-leader", "stop-standby", "restart", "restart-late", "kill-restart")

SHORT_SCRIPT = ("kill-restart", "stop-leader", "join", "restart")
PARTITIONS_BACK_SCRIPT = ("restart", "kill-restart", "stop-standby", "join", "restart-late",
                          "stop-leader", "join", "kill-restart", "restart", "stop-standby",
                          "join")
"""The first eleven changes of the long two-worker script: the last join gives
back to a worker partitions another worker held since it last had them."""
LONG_SCRIPTS: dict[int, tuple[str, ...]] = {
    2: (*PARTITIONS_BACK_SCRIPT, "restart-late",
        "kill-restart", "stop-leader", "join", "restart", "kill-restart", "stop-standby",
        "join", "restart-late", "stop-leader", "join"),
    3: ("restart", "stop-standby", "stop-leader", "join", "join",        # 3 -> 1 -> 3
        "kill-restart", "stop-leader", "stop-standby", "restart",       # -> 1, alone
        "join", "join", "restart-late", "kill-restart", "stop-standby",  # -> 3
        "join", "stop-leader", "join", "restart", "kill-restart",
        "stop-leader", "stop-leader", "join", "join", "restart-late"),   # 3 -> 1 -> 3
}


class GroupChangeFailure(AssertionError):
    """A worker exited on its own, or the group did not settle: the run ends."""


def check_script(script: Sequence[str], initial: int, pool: int) -> None:
    """`ValueError` unless every change of `script` can be made (a free port for a
    join, a second live worker for a stop) starting from `initial` of `pool` workers."""
    if not 1 <= initial <= pool:
        raise ValueError(f"start with 1 to {pool} workers, not {initial}")
    live = initial
    for index, kind in enumerate(script):
        if kind not in KINDS:
            raise ValueError(f"change {index}: {kind!r} is not one of {KINDS}")
        if kind == "join":
            if live == pool:
                raise ValueError(f"change {index}: join with every port of the pool in use")
            live += 1
        elif kind.startswith("stop"):
            if live == 1:
                raise ValueError(f"change {index}: {kind} would stop the last worker")
            live -= 1


@dataclass
class Tenure:
    """One run of a role function, from the tenures file."""

    role: str
    member: str
    pid: int
    tenure: int
    token: tuple[int, int]
    start_ns: int
    stop_ns: int | None
    reason: str = ""

    def describe(self) -> str:
        stop = "running" if self.stop_ns is None else f"{self.stop_ns}"
        return (f"{self.role} tenure {self.tenure} token {self.token[0]}:{self.token[1]} "
                f"pid {self.pid} ({self.member}) {self.start_ns}..{stop} {self.reason}")


@dataclass
class ChangeResult:
    """What one change cost and what the checks found."""

    index: int
    kind: str
    target: str
    held_by_target: int
    settle_s: float
    started: int
    charged_gaps: dict[str, float]
    raw_gaps: dict[str, float]
    exit_s: float | None = None
    """Seconds from the SIGTERM until the worker had exited (stops and restarts)."""
    findings: list[str] = field(default_factory=list)

    def line(self) -> str:
        charged = max(self.charged_gaps.values(), default=0.0)
        raw = max(self.raw_gaps.values(), default=0.0)
        return (f"#{self.index:2d} {self.kind:13s} {self.target:6s} (led {self.held_by_target}) "
                f"settled in {self.settle_s:6.1f} s, {self.started} tenures started, "
                + ("" if self.exit_s is None else f"exited in {self.exit_s:4.1f} s, ")
                + f"max gap {raw:5.2f} s (charged {charged:4.2f} s)"
                + "".join(f"\n    FINDING: {f}" for f in self.findings))


class ChangeGroup(AppGroup):
    """An `AppGroup` whose workers run the three user roles and no demo role."""

    def __init__(self, bootstrap: str, folder: Path) -> None:
        super().__init__(bootstrap, folder, partitions=PARTITIONS, lease=LEASE, renew=RENEW,
                         stagger=STAGGER)
        self.output_topic = f"group-changes-output-{self.app_id.rsplit('-', 1)[-1]}"

    def env(self, port: int, **extra: str) -> dict[str, str]:
        return super().env(port, COORDINATION_DEMO="0", GROUP_CHANGES_DIR=str(self.folder),
                           GROUP_CHANGES_OUTPUT=self.output_topic,
                           COORDINATION_SESSION_TIMEOUT=str(SESSION_TIMEOUT), **extra)

    def create_output_topic(self) -> None:
        async def create() -> None:
            admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
            await admin.start()
            try:
                await admin.create_topics([NewTopic(self.output_topic, len(ROLE_NAMES), 1)])
            finally:
                await admin.close()
        asyncio.run(create())


async def _read(bootstrap: str, topic: str, partitions: Sequence[int],
                seconds: float = 30.0) -> list[Any]:
    """Every committed record of `partitions` of `topic`, to their stable offsets."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in sorted(set(partitions))]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        records: list[Any] = []
        deadline = time.monotonic() + seconds
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic} did not reach its end in {seconds} s")
            for batch in (await consumer.getmany(timeout_ms=300)).values():
                records.extend(batch)
        return sorted(records, key=lambda r: (r.partition, r.offset))
    finally:
        await consumer.stop()


Story = set[tuple[str, str, int, int, int, str, int]]
"""``(kind, role, tenure, producer_id, producer_epoch, member, offset)`` per
``elected`` or ``resigned``; `offset` is the source record's in the state topic."""


def state_story(records: Sequence[Any]) -> Story:
    """What the state topic says happened to the roles' leases: each tenure's
    first lease record (its token's first, the library's tenure rule) and each
    lease tombstone that cleared a lease. `records` in offset order per partition."""
    story: Story = set()
    tenures: dict[tuple[str, int, int], int] = {}
    current: dict[str, tuple[int, Any]] = {}  # role -> (tenure, lease) until cleared
    for record in records:
        try:
            key = decode_key(record.key or b"")
        except ValueError:
            continue
        if key.kind != Kind.LEASE or key.role not in ROLE_NAMES:
            continue
        if not record.value:
            if key.role in current:
                tenure, lease = current.pop(key.role)
                story.add(("resigned", key.role, tenure, lease.producer_id,
                           lease.producer_epoch, lease.member, record.offset))
            continue
        lease = decode_lease(record.value)
        token = (key.role, lease.producer_id, lease.producer_epoch)
        if token not in tenures:
            tenures[token] = record.offset
            story.add(("elected", key.role, record.offset, lease.producer_id,
                       lease.producer_epoch, lease.member, record.offset))
        current[key.role] = (tenures[token], lease)
    return story


def event_story(records: Sequence[Any]) -> Story:
    """The same, from the ``elected`` and ``resigned`` events (a repeat counts once,
    as a subscriber deduping by role, kind and offset sees it)."""
    story: Story = set()
    for record in records:
        event = json.loads(record.value)
        if event["kind"] in ("elected", "resigned") and event["role"] in ROLE_NAMES:
            token = event["token"]
            story.add((event["kind"], event["role"], event["tenure"], token["producer_id"],
                       token["producer_epoch"], event["member"], event["offset"]))
    return story


def partition_lines(state: Sequence[Any], events: Sequence[Any], roles: set[str]) -> list[str]:
    """The state records and events of `roles`, a line each in offset order: what a
    disagreement's report shows, since the topics are gone with the test's broker."""
    lines = []
    for record in state:
        try:
            key = decode_key(record.key or b"")
        except ValueError:
            continue
        if key.role not in roles:
            continue
        what = f"{key.kind.name.lower()} {key.member}".strip()
        if key.kind == Kind.LEASE and record.value:
            lease = decode_lease(record.value)
            what += (f" {lease.member} token {lease.producer_id}:{lease.producer_epoch} "
                     f"deadline {lease.deadline}")
        elif not record.value:
            what += " tombstone"
        lines.append(f"  state p{record.partition} @{record.offset} ts {record.timestamp}: "
                     f"{key.role} {what}")
    for record in events:
        event = json.loads(record.value)
        if event["role"] in roles:
            lines.append(f"  event p{record.partition} @{record.offset}: {event['role']} "
                         f"{event['kind']} tenure {event.get('tenure')} offset "
                         f"{event.get('offset')} {event.get('member')} {event.get('token')}")
    return lines


def role_states(records: Sequence[Any]) -> dict[str, RoleState]:
    by_partition: dict[int, list[Record]] = {}
    for r in records:
        by_partition.setdefault(r.partition, []).append(
            Record(r.offset, r.key or b"", r.value, r.timestamp))
    return {name: build_role_state(name, by_partition.get(role_partition(name, PARTITIONS), []))
            for name in ROLE_NAMES}


def overlaps(tenures: Sequence[Tenure]) -> list[str]:
    """Runs of one role that overlap in time, or start out of tenure order."""
    return list(overlapping(tenures).values())


def overlapping(tenures: Sequence[Tenure]) -> dict[tuple[Any, ...], str]:
    """`overlaps`, each keyed by the two runs it names (a report names a run still
    running differently once it has stopped; the key stays)."""
    found: dict[tuple[Any, ...], str] = {}
    for name in ROLE_NAMES:
        runs = sorted((t for t in tenures if t.role == name), key=lambda t: t.start_ns)
        for i, later in enumerate(runs):
            pair = (name, later.pid, later.tenure)
            for earlier in runs[:i]:
                key = ("overlap", earlier.pid, earlier.tenure, *pair)
                if earlier.stop_ns is None:
                    found[key] = (f"overlap (the earlier still runs): {earlier.describe()} / "
                                  f"{later.describe()}")
                elif earlier.stop_ns > later.start_ns:
                    found[key] = (f"overlap of {(earlier.stop_ns - later.start_ns) / 1e6:.0f} "
                                  f"ms: {earlier.describe()} / {later.describe()}")
            if i and runs[i - 1].tenure >= later.tenure:
                found[("order", runs[i - 1].pid, runs[i - 1].tenure, *pair)] = (
                    f"tenure order: {runs[i - 1].describe()} then {later.describe()}")
    return found


def holes(runs: Sequence[Tenure], since: int, until: int) -> list[tuple[int, int]]:
    """Stretches of [since, until] in which none of `runs` ran (ns)."""
    spans = sorted((t.start_ns, until if t.stop_ns is None else t.stop_ns) for t in runs)
    found, cursor = [], since
    for start, stop in spans:
        if stop <= cursor:
            continue
        if start > cursor:
            found.append((cursor, min(start, until)))
        cursor = max(cursor, stop)
        if cursor >= until:
            break
    if cursor < until:
        found.append((cursor, until))
    return [(a, b) for a, b in found if b > a]


class Sampler:
    """Asks every candidate worker's ``/health`` which roles it runs and leads, in a thread."""

    def __init__(self, workers: Callable[[], list[AppWorker]]) -> None:
        self.workers = workers
        self.rounds: list[tuple[int, dict[str, bool]]] = []
        """(round start ns, role -> some probed worker runs the role's runner)."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="group-change sampler",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic_ns()
            candidate = dict.fromkeys(ROLE_NAMES, False)
            for worker in self.workers():
                try:
                    status, body = get_json(worker.url + "/health", timeout=PROBE_TIMEOUT)
                except Exception:  # starting or stopping
                    continue
                if status == 200:
                    for name in ROLE_NAMES:
                        runner = body["roles"].get(name)
                        if runner and runner["state"] not in ("idle", "stopped"):
                            candidate[name] = True
            self.rounds.append((began, candidate))
            self._stop.wait(SAMPLE_INTERVAL)

    def charged(self, name: str, start: int, end: int) -> tuple[int, int]:
        """The charged part of role `name`'s gap [start, end] and its tolerance (ns).

        Upper bounds: a gap no round fell into is charged whole; so is one in
        whose rounds a candidate was seen throughout; if the last round saw none,
        the candidate appeared after that round began."""
        inside = [r for r in list(self.rounds) if start <= r[0] <= end]
        if not inside:
            return end - start, 0
        first = len(inside)
        while first > 0 and inside[first - 1][1][name]:
            first -= 1
        if first == 0:
            return end - start, 0
        if first == len(inside):
            return end - inside[-1][0], 0
        return end - inside[first][0], inside[first][0] - inside[first - 1][0]


class GroupChangeRun:
    """One worker group on a pool of `pool` ports, driven through changes."""

    def __init__(self, bootstrap: str, folder: Path, pool: int,
                 log: Callable[[str], None] = print) -> None:
        self.group = ChangeGroup(bootstrap, folder)
        self.folder = folder
        self.ports = [free_port() for _ in range(pool)]
        self.live: dict[int, AppWorker] = {}
        self.stopping: set[int] = set()
        self.exits: dict[int, int] = {}
        """pid -> CLOCK_MONOTONIC ns at which the run had reaped it."""
        self.results: list[ChangeResult] = []
        self.findings: list[str] = []
        self.overlaps_reported: set[tuple[Any, ...]] = set()
        self.differences_reported: set[tuple[Any, ...]] = set()
        """Story entries and tenures already reported as a disagreement."""
        self.log = log
        self.bound = LEASE + STAGGER * pool
        self.sampler = Sampler(lambda: [w for w in list(self.live.values())
                                        if w.pid not in self.stopping])
        self._since = time.monotonic_ns()

    # --- the group ---------------------------------------------------------------------

    def __enter__(self) -> GroupChangeRun:
        self.group.create_topics()
        self.group.create_output_topic()
        self.sampler.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.sampler.stop()
        for worker in self.group.workers:
            if worker.alive():
                os.kill(worker.pid, signal.SIGTERM)
        # One SIGTERM each, as an orchestrator sends: a second one, arriving
        # after Faust has put the default handler back, would kill the process
        # (status -15) in the last steps of a clean stop.
        for worker in self.group.workers:
            try:
                worker.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait(10)
                self.findings.append(f"at the end: worker {worker.port} ignored SIGTERM for "
                                     f"{STOP_TIMEOUT} s:\n{worker.log_tail()}")
        self.findings += [f"worker {w.port} (pid {w.pid}) exited with status "
                          f"{w.process.returncode} after the final SIGTERM:\n{crash_lines(w)}"
                          for w in self.live.values() if w.process.returncode != 0]

    def _start(self, port: int) -> AppWorker:
        worker = self.group.start(port, app_module=APP_MODULE)
        self.live[port] = worker
        return worker

    def _terminate(self, worker: AppWorker) -> float:
        """SIGTERM `worker` and reap it; the seconds it took to exit."""
        self.stopping.add(worker.pid)
        try:
            took = worker.stop(STOP_TIMEOUT)
        finally:
            self.exits[worker.pid] = time.monotonic_ns()
            del self.live[worker.port]
        if worker.process.returncode != 0:
            raise GroupChangeFailure(
                f"worker {worker.port} (pid {worker.pid}) exited with status "
                f"{worker.process.returncode} after SIGTERM:\n{crash_lines(worker)}")
        return took

    def _kill(self, worker: AppWorker) -> None:
        self.stopping.add(worker.pid)
        worker.kill()
        self.exits[worker.pid] = time.monotonic_ns()
        del self.live[worker.port]

    def check_alive(self) -> None:
        for worker in list(self.live.values()):
            if not worker.alive():
                self.exits[worker.pid] = time.monotonic_ns()
                del self.live[worker.port]
                raise GroupChangeFailure(
                    f"worker {worker.port} (pid {worker.pid}) exited with status "
                    f"{worker.process.returncode} on its own:\n{crash_lines(worker)}")

    def _led(self) -> dict[int, int]:
        """Port -> how many roles the worker leads now (its /health)."""
        led = {}
        for port, worker in self.live.items():
            health = worker.health() or {"roles": {}}
            led[port] = sum(1 for r in health["roles"].values() if r.get("leading"))
        return led

    # --- changes -----------------------------------------------------------------------

    def start(self, count: int) -> ChangeResult:
        """Start `count` workers at once and let them settle (change 0)."""
        began = time.monotonic_ns()
        for port in self.ports[:count]:
            self._start(port)
        return self._settled(0, f"start {count}", "-", 0, began)

    def change(self, kind: str) -> ChangeResult:
        """Make one change (`KINDS`), wait for the group to settle, check it."""
        index = len(self.results)
        led = self._led()
        if kind == "join":
            port = next(p for p in self.ports if p not in self.live)
            began = time.monotonic_ns()
            self._start(port)
            return self._settled(index, kind, str(port), 0, began)
        pick = min if kind == "stop-standby" else max
        port = pick(sorted(led), key=lambda p: led[p])
        worker = self.live[port]
        began = time.monotonic_ns()
        exit_s = None
        if kind == "kill-restart":
            self._kill(worker)
        else:
            exit_s = self._terminate(worker)
        if kind == "restart-late":
            time.sleep(SESSION_TIMEOUT + 1.0)  # the fault itself: absent past the session
        if kind in ("restart", "restart-late", "kill-restart"):
            self._start(port)
        return self._settled(index, kind, str(port), led[port], began, exit_s)

    # --- settling and the checks -------------------------------------------------------

    def _settled(self, index: int, kind: str, target: str, held: int, began: int,
                 exit_s: float | None = None) -> ChangeResult:
        deadline = time.monotonic() + SETTLE_WITHIN
        why = "not asked yet"
        while True:
            self.check_alive()
            try:
                why = self._unsettled()
            except Exception as exc:  # a worker mid-restart, a slow broker: ask again
                why = repr(exc)
            if not why:
                break
            if time.monotonic() > deadline:
                raise GroupChangeFailure(f"change {index} ({kind} {target}) did not settle "
                                         f"in {SETTLE_WITHIN:g} s: {why}")
            time.sleep(POLL)
        settled = time.monotonic_ns()
        result = ChangeResult(index, kind, target, held, (settled - began) / 1e9, 0, {}, {},
                              exit_s)
        tenures = self.tenures()
        result.started = sum(1 for t in tenures if began <= t.start_ns <= settled)
        for name in ROLE_NAMES:
            runs = [t for t in tenures if t.role == name]
            for start, end in holes(runs, max(began, self._since), settled):
                raw = (end - start) / 1e9
                charged, tolerance = self.sampler.charged(name, start, end)
                result.raw_gaps[name] = max(result.raw_gaps.get(name, 0.0), raw)
                result.charged_gaps[name] = max(result.charged_gaps.get(name, 0.0),
                                                charged / 1e9)
                if charged / 1e9 > self.bound + tolerance / 1e9:
                    result.findings.append(
                        f"{name} had no leader for {charged / 1e9:.2f} s with a candidate "
                        f"available (bound {self.bound:g} s + {tolerance / 1e9:.2f} s): "
                        f"CLOCK_MONOTONIC {start}..{end}")
        for key, text in overlapping(tenures).items():
            if key not in self.overlaps_reported:
                self.overlaps_reported.add(key)
                result.findings.append(text)
        result.findings += self._disagreements(tenures)
        self._since = settled
        self.findings += result.findings
        self.results.append(result)
        self.log(result.line())
        return result

    def _unsettled(self) -> str:
        """Why the group has not settled, or '' once it has."""
        workers = list(self.live.values())
        leaders: dict[str, list[AppWorker]] = {name: [] for name in ROLE_NAMES}
        for worker in workers:
            health = worker.health()
            if health is None:
                return f"worker {worker.port} does not answer /health"
            for name in ROLE_NAMES:
                runner = health["roles"].get(name)
                if runner is None or runner["state"] in ("idle", "stopped"):
                    return f"worker {worker.port} does not run a candidate for {name}"
                if runner["leading"]:
                    leaders[name].append(worker)
        states = role_states(asyncio.run(_read(
            self.group.bootstrap, self.group.state_topic,
            [role_partition(n, PARTITIONS) for n in ROLE_NAMES])))
        now_ms = time.time_ns() // 1_000_000
        for name, state in states.items():
            if len(leaders[name]) != 1:
                return f"{name} is led by {[w.port for w in leaders[name]]}"
            leader = leaders[name][0]
            if state.lease is None or state.lease.member != leader.member or \
                    state.lease.deadline <= now_ms:
                return f"{name}: the state's lease {state.lease} is not {leader.member}'s"
            missing = [w.port for w in workers if w.member not in state.roster]
            if missing:
                return f"{name}: workers {missing} are not on the roster {state.roster}"
        for worker in workers:
            status, body = get_json(worker.url + "/roles/")
            if status != 200:
                return f"worker {worker.port} /roles/ answered {status}: {body}"
            if body["unavailable"]:
                return f"worker {worker.port} /roles/: unavailable {body['unavailable']}"
            rows = {row["role"]: row for row in body["roles"]}
            for name, state in states.items():
                row = rows.get(name)
                lease = state.lease
                assert lease is not None
                token = {"producer_id": lease.producer_id, "producer_epoch": lease.producer_epoch}
                if row is None or row["holder"] != lease.member or row["token"] != token:
                    return (f"worker {worker.port} /roles/ shows {name} as {row}, the state "
                            f"topic as {lease.member} {token}")
        return ""

    def _disagreements(self, tenures: Sequence[Tenure]) -> list[str]:
        """Events against the state topic, and the functions' tenures against both.

        Only differences not reported at an earlier change are waited for: a
        disagreement that stays would otherwise cost every later change its
        `AGREE_WITHIN` s, and the short run would reach pytest's timeout, whose
        thread method ends the process without stopping the workers."""
        partitions = [role_partition(n, PARTITIONS) for n in ROLE_NAMES]
        deadline = time.monotonic() + AGREE_WITHIN
        while True:
            state_records = asyncio.run(_read(
                self.group.bootstrap, self.group.state_topic, partitions))
            event_records = asyncio.run(_read(
                self.group.bootstrap, self.group.events_topic, partitions))
            state, events = state_story(state_records), event_story(event_records)
            elected = {(role, tenure, pid, epoch, member)
                       for kind, role, tenure, pid, epoch, member, _ in state
                       if kind == "elected"}
            ran = {(t.role, t.tenure, *t.token, t.member) for t in tenures}
            only_state = (state - events) - self.differences_reported
            only_events = (events - state) - self.differences_reported
            lacking = (ran - elected) - self.differences_reported
            found = []
            if only_state or only_events:
                found.append(f"the events and the state topic differ: only in the state "
                             f"{sorted(only_state)}, only in the events {sorted(only_events)}")
            if lacking:
                found.append(f"functions ran under tenures the state topic lacks: "
                             f"{sorted(lacking)}")
            if not found or time.monotonic() > deadline:
                self.differences_reported |= only_state | only_events | lacking
                if found:
                    roles = {entry[1] for entry in only_state | only_events} | \
                            {entry[0] for entry in lacking}
                    found[-1] += "\n" + "\n".join(
                        partition_lines(state_records, event_records, roles))
                return found
            time.sleep(POLL)

    def tenures(self) -> list[Tenure]:
        """Every function run so far, from the tenures file."""
        path = self.folder / "tenures.jsonl"
        runs: dict[tuple[int, str, int], Tenure] = {}
        lines = path.read_text().splitlines() if path.exists() else []
        for line in lines:
            entry = json.loads(line)
            key = (entry["pid"], entry["role"], entry["tenure"])
            if entry["event"] == "start":
                runs[key] = Tenure(entry["role"], entry["member"], entry["pid"],
                                   entry["tenure"], (entry["producer_id"],
                                                     entry["producer_epoch"]),
                                   entry["mono_ns"], None)
            elif key in runs:
                runs[key].stop_ns = entry["mono_ns"]
                runs[key].reason = entry["reason"]
        for run in runs.values():
            if run.stop_ns is None and run.pid in self.exits:
                run.stop_ns = self.exits[run.pid]
                run.reason = "reaped"
        return list(runs.values())

    # --- the end -----------------------------------------------------------------------

    def history(self) -> str:
        """The history checker over every role's output partition; findings are kept."""
        attempts = [a for path in sorted(self.folder.glob("journal-*.jsonl"))
                    for a in attempts_from_journal(path.read_text().splitlines())]
        output = asyncio.run(_read(self.group.bootstrap, self.group.output_topic,
                                   range(len(ROLE_NAMES))))
        summaries = []
        for partition, name in enumerate(ROLE_NAMES):
            report = check_history(
                [(r.offset, r.value) for r in output if r.partition == partition],
                [a for a in attempts if a.record.role == name])
            summaries.append(f"{name}: {report.summary()}")
            self.findings += [f"history of {name}: {v}" for v in report.violations]
        return "\n".join(summaries)

    def fences(self) -> list[str]:
        """Log lines of tenures that ended on their own (fenced, not stopped)."""
        return [line for worker in self.group.workers for line in own_lines(worker)
                if re.search(r"stopped the role's function: the tenure of", line)]


def own_lines(worker: AppWorker) -> list[str]:
    """The log lines of this process (a restarted worker appends to the same file)."""
    return [line for line in worker.log.read_text(errors="replace").splitlines()
            if f"] [{worker.pid}] [" in line]


def crash_lines(worker: AppWorker) -> str:
    bad = [line for line in own_lines(worker) if "[ERROR]" in line or "[CRITICAL]" in line]
    return "\n".join(bad[-12:]) or worker.log_tail()


@dataclass
class Summary:
    """The figures of one sequence, as docs/reliability.md records them."""

    workers: int
    changes: int
    handovers: int
    max_gap_s: float
    max_charged_gap_s: float
    settle_median_s: float
    settle_max_s: float
    crashes: int
    overlaps: int
    disagreements: int
    fenced_tenures: int
    history: str
    findings: list[str]
    took_s: float
    results: list[ChangeResult] = field(default_factory=list)

    def by_kind(self) -> str:
        """Per kind of change: how many, the longest gap (charged) and the settle times."""
        lines = []
        for kind in dict.fromkeys(r.kind for r in self.results if r.index > 0):
            mine = [r for r in self.results if r.kind == kind]
            settles = sorted(r.settle_s for r in mine)
            gap = max((g for r in mine for g in r.raw_gaps.values()), default=0.0)
            charged = max((g for r in mine for g in r.charged_gaps.values()), default=0.0)
            lines.append(f"  {kind:13s} x{len(mine):2d}: max gap {gap:5.2f} s (charged "
                         f"{charged:4.2f} s), settled in median {settles[len(settles) // 2]:.1f}"
                         f" s / max {settles[-1]:.1f} s")
        return "\n".join(lines)

    def text(self) -> str:
        return (f"{self.workers} workers: {self.changes} changes, {self.handovers} handovers, "
                f"max leaderless gap {self.max_gap_s:.2f} s (charged {self.max_charged_gap_s:.2f}"
                f" s, bound {LEASE + STAGGER * self.workers:g} s), time to settle median "
                f"{self.settle_median_s:.1f} s / max {self.settle_max_s:.1f} s, crashes "
                f"{self.crashes}, overlaps {self.overlaps}, disagreements {self.disagreements}, "
                f"fenced tenures {self.fenced_tenures}; {self.took_s:.0f} s\n{self.by_kind()}\n"
                f"{self.history}"
                + "".join(f"\n  FINDING: {f}" for f in self.findings))


def run_sequence(bootstrap: str, folder: Path, workers: int, script: Sequence[str],
                 log: Callable[[str], None] = print) -> Summary:
    """Start `workers` workers, make every change of `script`, check, summarise."""
    check_script(script, workers, workers)
    began = time.monotonic()
    crashes = 0
    with GroupChangeRun(bootstrap, folder, workers, log) as run:
        try:
            run.start(workers)
            for kind in script:
                run.change(kind)
        except GroupChangeFailure as failure:
            crashes += "exited" in str(failure)
            run.findings.append(str(failure))
            log(f"FAILURE: {failure}")
    # Every worker has stopped: the tenures file and the journals are complete.
    run.findings += [text for key, text in overlapping(run.tenures()).items()
                     if key not in run.overlaps_reported]
    history = run.history()
    fences = run.fences()
    for line in fences:
        log(f"  fenced: {line}")
    changes = [r for r in run.results if r.index > 0]
    settles = sorted(r.settle_s for r in changes) or [0.0]
    tenures = run.tenures()
    return Summary(
        workers=workers, changes=len(changes),
        handovers=len(tenures) - len({t.role for t in tenures}),
        max_gap_s=max((g for r in changes for g in r.raw_gaps.values()), default=0.0),
        max_charged_gap_s=max((g for r in changes for g in r.charged_gaps.values()),
                              default=0.0),
        settle_median_s=settles[len(settles) // 2], settle_max_s=settles[-1],
        crashes=crashes,
        overlaps=sum(1 for f in run.findings if f.startswith(("overlap", "tenure order"))),
        disagreements=sum(1 for f in run.findings
                          if any(word in f for word in ("differ", "lacks", "/roles/ shows"))),
        fenced_tenures=len(fences), history=history, findings=run.findings,
        took_s=time.monotonic() - began, results=run.results,
    )


def _broker(folder: Path) -> tuple[str, Callable[[], None]]:
    """A local broker (deploy/kafka/kafka.py), or ``KAFKA_BOOTSTRAP_SERVERS``."""
    configured = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if configured:
        return configured, lambda: None
    script = [sys.executable, str(ROOT / "deploy" / "kafka" / "kafka.py")]
    up = subprocess.run([*script, "up", "--dir", str(folder), "--port", str(kafka_port())],
                        capture_output=True, text=True, timeout=240, check=False)
    if up.returncode != 0:
        raise SystemExit(f"the local broker did not start:\n{up.stdout}\n{up.stderr}")

    def down() -> None:
        subprocess.run([*script, "down", "--dir", str(folder)], capture_output=True,
                       timeout=120, check=False)
    return up.stdout.strip().splitlines()[-1], down


def main(argv: list[str] | None = None) -> int:
    """Run the group-change sequences and print their summaries."""
    parser = argparse.ArgumentParser(prog="python -m tests.faults.group_changes",
                                     description=main.__doc__)
    parser.add_argument("--long", action="store_true",
                        help="the long scripts (2 and 3 workers, 20+ changes each); "
                             "default: the short script with 2 workers")
    parser.add_argument("--workers", type=int, choices=sorted(LONG_SCRIPTS), action="append",
                        help="only these group sizes (repeatable)")
    parser.add_argument("--dir", type=Path,
                        help="keep the logs, journals and tenures here (default: a temporary "
                             "folder, removed at the end)")
    args = parser.parse_args(argv)
    sizes = args.workers or (sorted(LONG_SCRIPTS) if args.long else [2])
    with tempfile.TemporaryDirectory(prefix="group-changes-") as temporary:
        folder = args.dir or Path(temporary)
        folder.mkdir(parents=True, exist_ok=True)
        bootstrap, down = _broker(folder / "kafka")
        summaries = []
        try:
            for size in sizes:
                script = LONG_SCRIPTS[size] if args.long else SHORT_SCRIPT
                sequence = folder / f"workers-{size}"
                sequence.mkdir()
                print(f"--- {size} workers, {len(script)} changes", flush=True)
                summaries.append(run_sequence(bootstrap, sequence, size, script,
                                              log=lambda s: print(s, flush=True)))
        finally:
            down()
    print("\n=== summary")
    for summary in summaries:
        print(summary.text())
    return 1 if any(s.findings for s in summaries) else 0


if __name__ == "__main__":
    raise SystemExit(main())

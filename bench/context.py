"""What every figure shares: the servers, the systems that can run, topics, workers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import procs
from bench.stats import Result

SYSTEMS = ("krabka", "etcd", "zookeeper")
# krabka's fencing modes in the election figures (graceful-handover,
# crash-failover, zombie-writes): each runs as a system of its own there, so
# the same scenario code alternates it trial by trial with the peers.
FENCING_SYSTEMS = {"epoch": "krabka", "term": "krabka-term"}


# What each --durability makes of the disk writes (every result's configuration says
# which ran): Kafka does not fsync a write (the OS flushes at its own pace) while
# etcd and ZooKeeper fsync every write, so two settings even that out, one each way.
DURABILITY = {
    "default": "Kafka's topics as configured (no fsync per write); etcd's and ZooKeeper's "
               "data on the run folder's disk, each fsyncing every write",
    "peers-tmpfs": "etcd's and ZooKeeper's data on tmpfs (/dev/shm): their fsyncs reach no "
                   "disk; Kafka's topics as configured",
    "kafka-fsync": "the state topic (and term mode's terms topic) with flush.messages=1: "
                   "the broker fsyncs every write to them, as the peers do to their logs",
}


def fencing_of(system: str) -> str | None:
    """The krabka fencing mode `system` runs, or None for a peer."""
    for mode, name in FENCING_SYSTEMS.items():
        if name == system:
            return mode
    return None


@dataclass
class Timing:
    lease: float = 3.0
    renew: float = 1.0
    stagger: float = 0.5


@dataclass
class Bench:
    """One invocation: its folder, servers, options and collected results."""

    folder: Path
    trials: int
    quick: bool
    timing: Timing
    systems: list[str]
    skipped: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    """Figures that raised, with the error: the run goes on with the next figure."""
    bootstrap: str = ""
    etcd: str = ""
    zookeeper: str = ""
    partitions: int = 4
    state_topic: str = ""
    terms_topic: str = ""
    fencings: list[str] = field(default_factory=lambda: ["epoch"])
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    results: list[Result] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    warmup: int = 0
    """Untimed graceful-handover trials per system before the timed ones."""
    cold: int = 10
    """The first graceful-handover rounds of the invocation, reported apart (cold)."""
    durability: str = "default"
    """A key of `DURABILITY`."""
    fresh_servers: bool = True
    """The servers were started by this invocation (not ``--bootstrap-servers``)."""
    ran: list[str] = field(default_factory=list)
    """The figures this invocation ran before the current one."""
    zookeeper_tick_ms: int = 200
    write_interval: float = 0.1
    tail_wait_ms: int = 200
    scale_roles: list[int] = field(default_factory=lambda: [100, 1000])
    scale_hold: float = 40.0
    scale_admission: float = 0.0
    """roles-scale's `RenewalLatencyAdmission` limit in seconds (0: none)."""
    scale_admission_rate: float = 0.0
    """Its cap in roles a second (0: none)."""
    scale_concurrency: int = 64
    """roles-scale's campaigns in flight at once."""
    scale_loops: list[str] = field(default_factory=lambda: ["asyncio"])
    """The event loops roles-scale runs its worker on, each a system of its own."""
    scale_settle_quiet: float = 0.0
    """Seconds after the worker settles its heap before the hold window opens; the
    renewals in between are a figure of their own (0: the window opens at once)."""
    group_roles: int = 3000
    group_start_rate: float = 0.0
    file_limit: dict[str, Any] = field(default_factory=dict)
    """What `bench.limits.raise_file_limit` did before the servers started."""
    kafka_pids: list[int] = field(default_factory=list)
    worker_records: int | None = None
    """worker-fold's state records (None: the figure's default for --quick or not)."""
    fold_workloads: list[str] = field(default_factory=lambda: ["contiguous", "interleaved"])
    """How fold-throughput and worker-fold fill their state topics (`bench.fold.WORKLOADS`)."""
    recovery_roles: int | None = None
    term_roles: list[int] = field(default_factory=lambda: [10, 1000, 10000])
    term_claims: int = 100_000
    commit_intervals: list[float] | None = None
    series_roles: int = 10_000
    """The roles metrics-series stands for."""

    def __post_init__(self) -> None:
        self.state_topic = f"bench-state-{self.run_id}"
        self.terms_topic = f"bench-terms-{self.run_id}"
        (self.folder / "logs").mkdir(parents=True, exist_ok=True)

    def config(self, **more: Any) -> dict[str, Any]:
        """The configuration recorded with each result."""
        return {"lease_s": self.timing.lease, "renew_s": self.timing.renew,
                "stagger_s": self.timing.stagger, "trials": self.trials, "quick": self.quick,
                "warmup_trials": self.warmup, "durability": self.durability,
                "versions": self.versions, **more}

    def active(self, wanted: tuple[str, ...] = SYSTEMS) -> list[str]:
        return [s for s in self.systems if s in wanted]

    def contenders(self) -> list[str]:
        """The systems of the election figures: krabka once per fencing mode, then the peers."""
        ours = ([FENCING_SYSTEMS[mode] for mode in self.fencings]
                if "krabka" in self.systems else [])
        return ours + [s for s in self.systems if fencing_of(s) is None]

    def add(self, result: Result) -> None:
        self.results.append(result)
        j = result.to_json(with_samples=False)
        label = result.figure if result.metric is None else f"{result.figure}:{result.metric}"
        p50 = "-" if j["p50"] is None else f"{j['p50']:.4g}"
        print(f"  {label:<34} {result.system:<10} n={j['n']:<4} p50={p50} {result.unit}"
              + (f"  ({result.skipped})" if result.skipped else ""), flush=True)

    def skip_result(self, figure: str, system: str, unit: str, reason: str,
                    metric: str | None = None) -> None:
        self.add(Result(figure, system, unit, [], self.config(), metric=metric,
                        skipped=reason))

    def role(self, figure: str, trial: int | str) -> str:
        return f"bench.{figure}.{self.run_id}.{trial}"

    # Workers.

    def worker(self, system: str, role: str, member: str, output: str,
               interval: float | None = None) -> procs.Child:
        t = self.timing
        fencing = fencing_of(system)
        args = ["--system", "krabka" if fencing else system, "--role", role, "--member", member,
                "--fencing", fencing or "epoch", "--terms-topic", self.terms_topic,
                "--bootstrap-servers", self.bootstrap, "--state-topic", self.state_topic,
                "--partitions", str(self.partitions), "--output", output,
                "--lease", str(t.lease), "--renew", str(t.renew), "--stagger", str(t.stagger),
                "--interval", str(self.write_interval if interval is None else interval),
                "--tail-wait-ms", str(self.tail_wait_ms),
                "--etcd", self.etcd or "-", "--zookeeper", self.zookeeper or "-"]
        log = self.folder / "logs" / f"{role}.{member}.{system}.log"
        return procs.python("bench.worker", *args, name=f"{system}:{role}:{member}", log=log)

    async def pair(self, system: str, role: str, output: str, interval: float | None = None,
                   members: tuple[str, str] = ("a", "b")) -> tuple[procs.Child, procs.Child]:
        """A leader (leading and writing) and one registered standby."""
        leader = self.worker(system, role, members[0], output, interval)
        await wait(leader, "wrote", 60)
        standby = self.worker(system, role, members[1], output, interval)
        await wait(standby, "registered", 60)
        return leader, standby

    # Topics.

    async def create_topic(self, name: str, partitions: int, *, compact: bool = False,
                           log_append_time: bool = False, fsync: bool = False,
                           configs: dict[str, str] | None = None) -> None:
        """Create `name` unless it exists; `fsync`: the broker flushes every write."""
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic
        from aiokafka.errors import TopicAlreadyExistsError

        wanted: dict[str, str] = {}
        if compact:
            wanted.update({"cleanup.policy": "compact", "segment.ms": "600000"})
        if log_append_time:
            wanted["message.timestamp.type"] = "LogAppendTime"
        if fsync:
            wanted["flush.messages"] = "1"
        wanted.update(configs or {})
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        await admin.start()
        try:
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics([NewTopic(name, partitions, 1, topic_configs=wanted)])
        finally:
            await admin.close()


async def wait(child: procs.Child, event: str, seconds: float, **match: Any) -> dict[str, Any]:
    """`child.wait_for` off the event loop (bounded by `seconds`)."""
    return await asyncio.to_thread(child.wait_for, event, seconds, **match)


async def stop(*children: procs.Child) -> None:
    def stop_all() -> None:
        for child in children:
            child.stop(timeout=8)
            procs.forget(child)
    await asyncio.to_thread(stop_all)


def now_ms() -> float:
    return time.time() * 1000


@dataclass(frozen=True)
class OutputRecord:
    """One record of an output topic's partition 0, as a reader sees it."""

    offset: int
    timestamp: int
    """The broker's LogAppendTime (the zombie topics are created with it), ms."""
    headers: tuple[tuple[str, bytes], ...]
    value: dict[str, Any] | None
    """The worker's JSON record; None for anything else (a term barrier)."""


async def read_output(bootstrap: str, topic: str) -> list[OutputRecord]:
    """Every committed record of partition 0 of `topic`, in offset order."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                                enable_auto_commit=False, group_id=None)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        out = []
        deadline = time.monotonic() + 30
        while await consumer.position(tp) < end and time.monotonic() < deadline:
            batch = await consumer.getmany(tp, timeout_ms=500)
            for record in batch.get(tp, []):
                value = None
                with contextlib.suppress(ValueError, TypeError):
                    value = json.loads(record.value)
                out.append(OutputRecord(record.offset, record.timestamp,
                                        tuple(record.headers),
                                        value if isinstance(value, dict) else None))
        return out
    finally:
        await consumer.stop()

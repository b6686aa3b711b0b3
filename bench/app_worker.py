"""The whole Faust worker of the bench: ``python -m faust -A app.main worker`` processes.

A `WorkerGroup` is one consumer group (its own app id, so its own changelogs
and ticks topic) on topics of its own; `AppWorker` is one process of it,
started with `bench.procs` (so `procs.stop_all` stops it by PID) and
queried over HTTP with aiohttp, the way an operator's tooling would. The
worker hosts no role: the figures measure its fold, its recovery and its web
view, not an election.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from bench import procs
from bench.context import Bench

T = TypeVar("T")

# worker-fold's readiness probe interval (ListOffsets of the state topic):
# the worker's fold lag is measured against the ends it last learnt, so that
# figure asks for fresh ones twice a second rather than every 2 s. A shorter
# interval bounds the probe so tightly that a busy worker never answers it;
# and a probe is also bounded by its interval, so the other figures keep the
# worker's default, the /ready a user sees.
FOLD_PROBE_INTERVAL = 0.5


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class WorkerGroup:
    """One worker group's names and topics (created with ``deploy/topics.py``)."""

    def __init__(self, bench: Bench, name: str, partitions: int, *,
                 state_topic: str | None = None, commit_interval: float | None = None,
                 probe_interval: float | None = None) -> None:
        self.bench = bench
        suffix = f"{bench.run_id}-{name}"
        self.partitions = partitions
        self.app_id = f"bench-worker-{suffix}"
        self.state_topic = state_topic or f"bench-worker-state-{suffix}"
        self.terms_topic = f"bench-worker-terms-{suffix}"
        self.events_topic = f"bench-worker-events-{suffix}"
        self.commit_interval = commit_interval
        self.probe_interval = probe_interval
        self.folder = bench.folder / "workers" / suffix
        self.folder.mkdir(parents=True, exist_ok=True)
        self.started = 0

    @property
    def changelog(self) -> str:
        """The role_state table's changelog topic (Faust's name for it)."""
        return f"{self.app_id}-role_state-changelog"

    def create_topics(self) -> None:
        """The state, terms and events topics, as an operator creates them."""
        done = subprocess.run(
            [sys.executable, str(procs.ROOT / "deploy" / "topics.py"), "--bootstrap-servers",
             self.bench.bootstrap, "--partitions", str(self.partitions),
             "--segment-ms", "3600000", "--state-topic", self.state_topic,
             "--terms-topic", self.terms_topic, "--events-topic", self.events_topic],
            capture_output=True, text=True, timeout=120, check=False, cwd=procs.ROOT)
        if done.returncode != 0:
            raise RuntimeError(f"deploy/topics.py failed:\n{done.stdout}\n{done.stderr}")

    async def state_ends(self) -> dict[int, int]:
        """The state topic's last stable offset of each partition."""
        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = AIOKafkaConsumer(bootstrap_servers=self.bench.bootstrap,
                                    isolation_level="read_committed", group_id=None)
        await consumer.start()
        try:
            tps = [TopicPartition(self.state_topic, p) for p in range(self.partitions)]
            return {tp.partition: offset
                    for tp, offset in (await consumer.end_offsets(tps)).items()}
        finally:
            await consumer.stop()

    def start(self, *, data_dir: Path | None = None) -> AppWorker:
        """A worker on a free port, with `data_dir` (by default an empty data
        directory of its own)."""
        self.started += 1
        return AppWorker(self, free_port(), data_dir or self.folder / f"data-{self.started}")


class AppWorker:
    """One worker process; `started` is the monotonic instant just before it was spawned."""

    def __init__(self, group: WorkerGroup, port: int, data_dir: Path) -> None:
        self.group = group
        self.port = port
        self.data_dir = data_dir
        self.log = group.folder / f"worker-{port}.log"
        self.url = f"http://127.0.0.1:{port}"
        env = {
            "KAFKA_BOOTSTRAP_SERVERS": group.bench.bootstrap,
            "COORDINATION_APP_ID": group.app_id,
            "COORDINATION_STATE_TOPIC": group.state_topic,
            "COORDINATION_TERMS_TOPIC": group.terms_topic,
            "COORDINATION_EVENTS_TOPIC": group.events_topic,
            "COORDINATION_PARTITIONS": str(group.partitions),
            "COORDINATION_WEB_PORT": str(port),
            "COORDINATION_WEB_HOST": "127.0.0.1",
            "COORDINATION_WEB_BIND": "127.0.0.1",
            "COORDINATION_DATA_DIR": str(data_dir),
            "COORDINATION_DEMO": "0",
            "COORDINATION_SESSION_TIMEOUT": "6",
        }
        if group.commit_interval is not None:
            env["COORDINATION_COMMIT_INTERVAL"] = str(group.commit_interval)
        if group.probe_interval is not None:
            env["COORDINATION_READY_PROBE_INTERVAL"] = str(group.probe_interval)
        self.started = time.perf_counter()
        # At the level the deploy files run workers at. At ``-l warn`` Faust's
        # terminal spinner sets the root logger to DEBUG, and every debug call
        # of Faust and aiokafka then builds a record (about a tenth of the fold).
        self.child = procs.Child(
            [sys.executable, "-m", "faust", "-A", "app.main", "worker", "-l", "info"],
            name=f"faust-worker:{group.app_id}:{port}",
            log=self.log, json_lines=False, env=env,
            new_session=True)

    async def get(self, session: Any, path: str) -> tuple[int, Any]:
        """GET `path`: the status and the JSON body (None when it is not JSON)."""
        async with session.get(self.url + path) as answer:
            try:
                body = await answer.json(content_type=None)
            except ValueError:
                body = None
            return answer.status, body

    async def until(self, check: Callable[[], Awaitable[T | None]], seconds: float,
                    what: str) -> T:
        """`until` with this worker's exit as a failure."""
        return await until(check, seconds, what, child=self.child)

    async def folded_to_end(self, session: Any, seconds: float,
                            after: dict[int, int] | None = None) -> float:
        """Seconds from the spawn to the fold being at the end of the state topic.

        Both must hold: the group's offsets committed on the broker are at the
        topic's ends (under exactly_once they commit in one transaction with
        the table's changelog and the events), and ``GET /ready`` shows every
        state partition assigned here with a fold lag of 0. The worker's view
        alone is not enough: right after the start it was seen to report 0 on
        every partition before its fold had read anything. On a topic written
        in transactions the fold commits the offset after each partition's last
        record, one short of its end (the commit marker): `after` gives those
        offsets (None: the last stable offsets).
        """
        from aiokafka.admin import AIOKafkaAdminClient
        from aiokafka.errors import KafkaError

        ends = after if after is not None else await self.group.state_ends()
        admin = AIOKafkaAdminClient(bootstrap_servers=self.group.bench.bootstrap)
        await admin.start()

        async def folded() -> float | None:
            if any(ends.values()):
                try:
                    offsets = await admin.list_consumer_group_offsets(self.group.app_id)
                except KafkaError as exc:
                    # On a broker that has just started the group has no
                    # coordinator yet (its offsets topic is being created).
                    if not exc.retriable:
                        raise
                    return None
                committed = {tp.partition: meta.offset for tp, meta in offsets.items()
                             if tp.topic == self.group.state_topic}
                if any(committed.get(p, 0) < end for p, end in ends.items()):
                    return None
            _, body = await self.get(session, "/ready")
            lag = (body or {}).get("fold_lag") or {}
            if len(lag) == self.group.partitions and not any(lag.values()):
                return time.perf_counter() - self.started
            return None
        try:
            return await self.until(folded, seconds, "the fold at the end of every partition")
        finally:
            await admin.close()

    async def stop(self) -> None:
        await asyncio.to_thread(self.child.stop, 20.0)
        procs.forget(self.child)


async def until(check: Callable[[], Awaitable[T | None]], seconds: float, what: str, *,
                child: procs.Child | None = None, interval: float = 0.05) -> T:
    """`check()`'s first truthy value, asked every `interval` s for `seconds`
    (a server not answering yet counts as falsy; `child` exiting fails at once)."""
    import aiohttp

    deadline = time.monotonic() + seconds
    last: Any = None
    while True:
        if child is not None and not child.alive():
            raise procs.ChildError(f"{child.name} exited with {child.process.returncode} "
                                   f"before {what}; {child.tail()}")
        try:
            last = await check()
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:  # not up yet
            last = exc
        if last and not isinstance(last, Exception):
            return last
        if time.monotonic() > deadline:
            tail = "" if child is None else f"; {child.tail()}"
            raise TimeoutError(f"{what}: not within {seconds:g} s (last: {last!r}){tail}")
        await asyncio.sleep(interval)

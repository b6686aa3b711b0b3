"""`make run`: the main job, run in the foreground until Ctrl-C or SIGTERM.

Starts the local Kafka broker, creates the topics, and runs three Faust
workers of the application (`app.main`) hosting the demo role, which writes
fenced records. The first worker's dashboard is on http://127.0.0.1:6066/.
It says what it is doing while it starts (the jars, the broker, the topics,
each worker serving, the first election), then prints every leadership-change
event of the events topic as one line until it is stopped. The workers' own
logs go to files in the run directory (``COORDINATION_LOG_FORMAT=json`` makes
them JSON, one object per line).

The broker and each worker run in their own process group, so a terminal's
Ctrl-C reaches this script only. On Ctrl-C or SIGTERM the script stops the
workers first (SIGTERM: each resigns its roles, bounded to a few seconds;
SIGKILL after a grace period), then the broker, each by PID.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

# A script of the checkout: its defaults are the checkout's library's, not
# those of whatever version is installed.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from agents.events import describe
from app.settings import Settings
from deploy.kafka.process import ensure_jars
from krabka.defaults import PARTITIONS

ROOT = Path(__file__).resolve().parent.parent
KAFKA = [sys.executable, str(ROOT / "deploy" / "kafka" / "kafka.py")]
TOPICS = [sys.executable, str(ROOT / "deploy" / "topics.py")]
WORKER_STOP_GRACE = 20.0
READY_TIMEOUT = 180.0
TOPIC_METADATA_SECONDS = 30.0
STEPS = 5


def _say(message: str) -> None:
    print(message, flush=True)


def _worker_env(bootstrap: str, port: int, data: Path, partitions: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "COORDINATION_PARTITIONS": str(partitions),
        "COORDINATION_WEB_PORT": str(port),
        "COORDINATION_WEB_HOST": "127.0.0.1",
        "COORDINATION_WEB_BIND": "127.0.0.1",
        "COORDINATION_DATA_DIR": str(data),
        "COORDINATION_DEMO": "1",
        "PYTHONPATH": str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
    })
    # A short lease makes a demo failover visible in seconds (overridable).
    env.setdefault("COORDINATION_LEASE_DURATION", "10")
    env.setdefault("COORDINATION_RENEW_INTERVAL", "3")
    env.setdefault("COORDINATION_CHALLENGE_STAGGER", "2")
    return env


def _start_worker(bootstrap: str, port: int, folder: Path, partitions: int
                  ) -> subprocess.Popen[bytes]:
    data = folder / f"worker-{port}"
    data.mkdir(parents=True, exist_ok=True)
    log = (folder / f"worker-{port}.log").open("ab")
    return subprocess.Popen(
        [sys.executable, "-m", "faust", "-A", "app.main", "worker", "-l", "info"],
        cwd=ROOT, env=_worker_env(bootstrap, port, data, partitions),
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: Ctrl-C does not reach it
    )


def _stop_workers(workers: list[subprocess.Popen[bytes]]) -> None:
    for worker in workers:
        if worker.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.pid, signal.SIGTERM)
    deadline = time.monotonic() + WORKER_STOP_GRACE
    for worker in workers:
        try:
            worker.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _say(f"worker pid {worker.pid} did not stop in {WORKER_STOP_GRACE:g} s; killing it")
            worker.kill()
            worker.wait()


def _step(number: int, message: str) -> None:
    _say(f"[{number}/{STEPS}] {message}")


def _serving(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "health", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


class _NotLeaderYet(logging.Filter):
    """Drops aiokafka's "Failed fetch offsets" record for a partition whose leader
    is not ready yet, which its fetcher retries."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.msg == "Failed fetch offsets from %s: %s"
                    and "NotLeaderForPartitionError" in record.getMessage())


class EventFollower:
    """Prints the events topic's new events, one line each, from a thread of its own.

    `start` returns once the consumer stands at the topic's end, so every
    event of this run is printed (older ones, of earlier runs, are not).
    `first_election` is set at the first ``elected`` event.
    """

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.first_election = threading.Event()
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="events", daemon=True)

    def start(self, timeout: float = 60.0) -> None:
        self._thread.start()
        if not self._ready.wait(timeout) or self._error is not None:
            raise RuntimeError(f"cannot follow {self.topic}: {self._error!r}")

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            asyncio.run(self._follow())
        except BaseException as exc:  # reported by start(), or once while following
            self._error = exc
            self._ready.set()
            _say(f"stopped following {self.topic}: {exc!r}")

    async def _follow(self) -> None:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        # A topic created a moment ago has no partition leader for a while:
        # aiokafka warns and retries; the terminal shows only what it gives up on.
        logging.getLogger("aiokafka").setLevel(logging.ERROR)
        # One retry it logs at error level: an offset reset answered "not the
        # leader" (seen even after the metadata named the leader, and with
        # end_offsets() before the assignment). The fetcher retries it.
        logging.getLogger("aiokafka.consumer.fetcher").addFilter(_NotLeaderYet())

        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap,
                                    isolation_level="read_committed",
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            await self._until_known(consumer)
            partitions = [TopicPartition(self.topic, p) for p in range(self.partitions)]
            consumer.assign(partitions)
            await consumer.seek_to_end(*partitions)
            for tp in partitions:
                await consumer.position(tp)  # resolve "the end" now, before any worker starts
            self._ready.set()
            while not self._stop.is_set():
                batch = await consumer.getmany(timeout_ms=500)
                records = sorted((r for rs in batch.values() for r in rs),
                                 key=lambda r: (r.timestamp, r.partition, r.offset))
                for record in records:
                    self._show(record.value)
        finally:
            await consumer.stop()

    async def _until_known(self, consumer: Any) -> None:
        """Wait until the cluster's metadata lists the topic.

        An assignment of a topic the metadata does not list yet logs "Topic
        ... not found in cluster metadata" at error level on every retry (about
        30 lines after a fresh start); a full metadata fetch (`topics()`) does not.
        """
        deadline = time.monotonic() + TOPIC_METADATA_SECONDS
        while self.topic not in await consumer.topics():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the topic {self.topic!r} has not appeared in "
                                   f"{TOPIC_METADATA_SECONDS:.0f} s")
            await asyncio.sleep(0.1)

    def _show(self, value: bytes | None) -> None:
        try:
            event = json.loads(value or b"")
        except ValueError:
            _say(f"(an unreadable event: {value!r})")
            return
        _say(describe(event))
        if event.get("kind") == "elected" and not self.first_election.is_set():
            self.first_election.set()


class StopRequest:
    """Set by the SIGINT and SIGTERM handler, waited for by the main thread.

    Not a `threading.Event`: its `set()` takes the lock its `wait()` holds
    for a moment at each call, and a signal handler runs on the main thread
    between two bytecodes, possibly while that thread holds the lock; the
    handler then waits for its own thread forever (once, `make run` ignored
    SIGTERM for a minute). A flag and short sleeps take no lock.
    """

    POLL_SECONDS = 0.05

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float) -> bool:
        """Wait until set or `timeout` seconds passed; whether it is set."""
        deadline = time.monotonic() + timeout
        while not self._set:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(self.POLL_SECONDS, left))
        return self._set


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kafka-dir", default=str(ROOT / ".cache" / "kafka" / "local"))
    parser.add_argument("--kafka-port", default="9092")
    parser.add_argument("--run-dir", default=str(ROOT / ".cache" / "run"),
                        help="workers' data directories and logs")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--web-port", type=int, default=6066, help="the first worker's port")
    parser.add_argument("--partitions", type=int,
                        default=int(os.environ.get("COORDINATION_PARTITIONS", PARTITIONS)))
    args = parser.parse_args()

    stop = StopRequest()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())

    _step(1, f"Kafka jars: {ensure_jars()}")
    _step(2, f"starting the local Kafka broker in {args.kafka_dir} ...")
    started = subprocess.run(
        [*KAFKA, "up", "--dir", args.kafka_dir, "--port", args.kafka_port],
        stdout=subprocess.PIPE, text=True, check=False,
    )
    if started.returncode != 0:
        _say("the local Kafka broker did not start; see the log named above")
        return started.returncode
    bootstrap = started.stdout.strip().splitlines()[-1]
    workers: list[subprocess.Popen[bytes]] = []
    follower: EventFollower | None = None
    try:
        _say(f"Kafka is up: bootstrap servers {bootstrap}")
        _step(3, "creating the topics ...")
        topics = subprocess.run(
            [*TOPICS, "--bootstrap-servers", bootstrap, "--partitions", str(args.partitions),
             "--demo"], check=False)
        if topics.returncode != 0:
            _say("the topics could not be created (see above)")
            return topics.returncode
        follower = EventFollower(bootstrap, Settings.from_env().events_topic, args.partitions)
        follower.start()
        folder = Path(args.run_dir)
        folder.mkdir(parents=True, exist_ok=True)
        ports = [args.web_port + i for i in range(args.workers)]
        for port in ports:
            workers.append(_start_worker(bootstrap, port, folder, args.partitions))
        _step(4, f"started {len(workers)} workers (pids "
                 f"{', '.join(str(w.pid) for w in workers)}); logs in {folder}; waiting for "
                 "each to serve ...")
        began = time.monotonic()
        waiting = dict(zip(ports, workers, strict=True))
        while waiting and not stop.is_set():
            for port, worker in list(waiting.items()):
                if _serving(f"http://127.0.0.1:{port}/"):
                    _say(f"worker on port {port} (pid {worker.pid}) is up: "
                         f"http://127.0.0.1:{port}/ after {time.monotonic() - began:.1f} s")
                    del waiting[port]
                elif worker.poll() is not None:
                    _say(f"worker on port {port} exited with {worker.returncode}; see "
                         f"{folder / f'worker-{port}.log'}")
                    return 1
            if time.monotonic() - began > READY_TIMEOUT:
                _say(f"workers on ports {sorted(waiting)} did not serve within "
                     f"{READY_TIMEOUT:g} s; see {folder}")
                return 1
            stop.wait(0.5)
        if not stop.is_set():
            _step(5, "waiting for the first election (its event follows) ...")
        while not stop.is_set() and not follower.first_election.wait(0.5):
            if time.monotonic() - began > 2 * READY_TIMEOUT:
                _say("no election within the time allowed; see the workers' logs in "
                     f"{folder}")
                return 1
        if not stop.is_set():
            _say(f"Dashboard: http://127.0.0.1:{ports[0]}/")
            _say("Following leadership changes. Press Ctrl-C to stop (workers resign their "
                 "roles first, then the broker).")
        while not stop.wait(1.0):
            for port, worker in zip(ports, workers, strict=True):
                if worker.returncode is None and worker.poll() is not None:
                    _say(f"worker on port {port} exited with {worker.returncode}; see "
                         f"{folder / f'worker-{port}.log'}")
    finally:
        if workers:
            _say("stopping the workers (each resigns its roles) ...")
            _stop_workers(workers)
        if follower is not None:
            follower.stop()
        _say("stopping the local Kafka broker ...")
        subprocess.run([*KAFKA, "down", "--dir", args.kafka_dir], check=False)
    return 0

if __name__ == "__main__":
    sys.exit(main())

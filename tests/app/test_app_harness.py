"""Real worker processes of the Faust app for the integration tests (no tests here).

`AppGroup` names one worker group's topics uniquely (so tests share a broker
without sharing state), creates them with ``deploy/topics.py`` and starts
``python -m faust -A app.main worker`` processes; `AppWorker` is one of them,
stopped by PID. `poll` waits for a condition with a deadline: no fixed sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from krabka.format.partition import role_partition
from tests.support.lease_io import registration_record
from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")
STARTED: list[AppWorker] = []
"""Every worker this process started, so a failed test's report can show the
logs its workers wrote (tests/conftest.py)."""


def poll(condition: Callable[[], T | None], timeout: float, what: str,
         interval: float = 0.2) -> T:
    """`condition()`'s first truthy value, checked until `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = condition()
        except Exception as exc:  # a worker mid-restart: try again until the deadline
            last = exc
        if last and not isinstance(last, Exception):
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s (last: {last!r})")
        time.sleep(interval)


def get_json(url: str, timeout: float = 5.0) -> tuple[int, Any]:
    """GET `url`: the status and the JSON body (errors included)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        body = exc.read()
        try:
            return exc.code, json.loads(body)
        except ValueError:
            return exc.code, body.decode(errors="replace")


def get_text(url: str, timeout: float = 5.0) -> tuple[int, str, str]:
    """GET `url`: status, content type and text."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status, response.headers.get_content_type(), response.read().decode()


class AppGroup:
    """One worker group: unique topic names, shared settings, its workers."""

    def __init__(self, bootstrap: str, folder: Path, *, partitions: int = 6,
                 lease: float = 4.0, renew: float = 1.0, stagger: float = 0.5,
                 extra_env: dict[str, str] | None = None) -> None:
        suffix = uuid.uuid4().hex[:8]
        self.bootstrap = bootstrap
        self.folder = folder
        self.partitions = partitions
        self.app_id = f"krabka-it-{suffix}"
        self.state_topic = f"__coordination_state_it_{suffix}"
        self.terms_topic = f"__coordination_terms_it_{suffix}"
        self.events_topic = f"coordination-leadership-changes-it-{suffix}"
        self.demo_topic = f"coordination-demo-output-it-{suffix}"
        self.settings = {"lease": lease, "renew": renew, "stagger": stagger}
        self.extra_env = extra_env or {}
        self.workers: list[AppWorker] = []

    def env(self, port: int, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update({
            "KAFKA_BOOTSTRAP_SERVERS": self.bootstrap,
            "COORDINATION_APP_ID": self.app_id,
            "COORDINATION_STATE_TOPIC": self.state_topic,
            "COORDINATION_TERMS_TOPIC": self.terms_topic,
            "COORDINATION_EVENTS_TOPIC": self.events_topic,
            "COORDINATION_DEMO_TOPIC": self.demo_topic,
            "COORDINATION_PARTITIONS": str(self.partitions),
            "COORDINATION_LEASE_DURATION": str(self.settings["lease"]),
            "COORDINATION_RENEW_INTERVAL": str(self.settings["renew"]),
            "COORDINATION_CHALLENGE_STAGGER": str(self.settings["stagger"]),
            "COORDINATION_WEB_PORT": str(port),
            "COORDINATION_WEB_HOST": "127.0.0.1",
            "COORDINATION_WEB_BIND": "127.0.0.1",
            "COORDINATION_DATA_DIR": str(self.folder / f"data-{port}"),
            "COORDINATION_DEMO": "1",
            "COORDINATION_DEMO_INTERVAL": "0.2",
            "COORDINATION_SESSION_TIMEOUT": "6",
            "PYTHONPATH": str(ROOT),
            **self.extra_env,
            **extra,
        })
        return env

    def create_topics(self, segment_ms: int = 3_600_000, *, env: dict[str, str] | None = None,
                      check: bool = True) -> subprocess.CompletedProcess[str]:
        """The state and terms (long segments: no compaction mid-test), events and demo
        topics (`env`: more variables for deploy/topics.py, such as KAFKA_SASL_USERNAME)."""
        return subprocess.run(
            [sys.executable, str(ROOT / "deploy" / "topics.py"), "--bootstrap-servers",
             self.bootstrap, "--partitions", str(self.partitions), "--segment-ms",
             str(segment_ms), "--demo", "--state-topic", self.state_topic,
             "--terms-topic", self.terms_topic, "--events-topic", self.events_topic,
             "--demo-topic", self.demo_topic],
            check=check, capture_output=True, text=True, timeout=60,
            env={**os.environ, **(env or {})},
        )

    def start(self, port: int | None = None, *, app_module: str = "app.main",
              env: dict[str, str] | None = None) -> AppWorker:
        """A worker of ``faust -A APP_MODULE`` (by default the service's own app);
        `env` overrides the group's variables for this worker."""
        worker = AppWorker(self, port or free_port(), app_module, env)
        self.workers.append(worker)
        return worker

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run the operator CLI, ``python -m krabka ARGS``, with this group's settings."""
        return subprocess.run(
            [sys.executable, "-m", "krabka", *args],
            env=self.env(free_port()), cwd=ROOT, capture_output=True, text=True,
            timeout=timeout, check=False,
        )

    def stop_all(self) -> None:
        for worker in self.workers:
            worker.stop()

    def read(self, topic: str, timeout: float = 20.0) -> list[Any]:
        """Every committed record of `topic` (read_committed, to the stable offset)."""
        partitions = 1 if topic == self.demo_topic else self.partitions
        return asyncio.run(read_committed(self.bootstrap, topic, partitions, timeout))


async def read_committed(bootstrap: str, topic: str, count: int, seconds: float) -> list[Any]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in range(count)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)  # the stable offsets, read_committed
        records: list[Any] = []
        deadline = time.monotonic() + seconds
        while [tp for tp in partitions if await consumer.position(tp) < ends[tp]]:
            if time.monotonic() > deadline:
                raise AssertionError(f"reading {topic} did not reach its end in {seconds} s")
            batch = await consumer.getmany(timeout_ms=500)
            for tp_records in batch.values():
                records.extend(tp_records)
        return sorted(records, key=lambda r: (r.partition, r.offset))
    finally:
        await consumer.stop()


async def register_roles(bootstrap: str, topic: str, roles: Sequence[str], partitions: int,
                         members: Sequence[str] = ("m0",)) -> None:
    """A registration of each of `members` for each of `roles` on the state topic
    `topic` of `partitions` partitions, written before the test's workers fold them."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20,
                                max_batch_size=512 * 1024)
    await producer.start()
    try:
        sends = []
        for member in members:
            for role in roles:
                key, value = registration_record(role, member)
                sends.append(await producer.send(topic, value, key=key,
                                                 partition=role_partition(role, partitions)))
        await asyncio.gather(*sends)
    finally:
        await producer.stop()


class AppWorker:
    """One ``faust -A app.main worker`` process, its log and its web port."""

    def __init__(self, group: AppGroup, port: int, app_module: str = "app.main",
                 env: dict[str, str] | None = None) -> None:
        self.group = group
        self.port = port
        self.app_module = app_module
        self.url = f"http://127.0.0.1:{port}"
        self.member = f"{socket.gethostname()}:{port}"
        self.log = group.folder / f"worker-{port}.log"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "faust", "-A", app_module, "worker", "-l", "info"],
            env=group.env(port, **(env or {})), cwd=ROOT, stdin=subprocess.DEVNULL,
            stdout=self.log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True,
        )
        self.pid = self.process.pid
        STARTED.append(self)

    def get(self, path: str) -> tuple[int, Any]:
        return get_json(self.url + path)

    def health(self) -> dict[str, Any] | None:
        with contextlib.suppress(OSError, ValueError):
            status, body = self.get("/health")
            if status == 200:
                return body  # type: ignore[no-any-return]
        return None

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout: float = 30.0) -> float:
        """SIGTERM, wait (SIGKILL after `timeout`); the seconds it took to exit."""
        started = time.monotonic()
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
                raise AssertionError(f"worker {self.port} ignored SIGTERM for {timeout} s:\n"
                                     f"{self.log_tail()}") from None
        return time.monotonic() - started

    def kill(self) -> None:
        """SIGKILL: no resignation, no clean shutdown."""
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
            self.process.wait(10)

"""Shared fixtures: a real Kafka broker for the tests marked `integration`.

With ``KAFKA_BOOTSTRAP_SERVERS`` set, those tests use that cluster. Without
it, the first test that needs a broker starts a local single-node KRaft broker
from the Maven Central jars (``deploy/kafka/kafka.py``) in a temporary folder,
and the session stops it by PID at the end, also when tests fail.

`secure_kafka` is another broker, started the same way by the first test
that needs it: SASL_SSL with SCRAM users (``admin``, a super user, and the
ACL-less ``worker``, ``limited`` and ``term``), TLS from keytool and the
StandardAuthorizer (tests/support/secure_cluster.py).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from tests.support.ports import kafka_port
from tests.support.secure_cluster import SecureCluster

# A test past the suite's timeout still has its processes stopped, by PID.
pytest_plugins = ("tests.support.timeout_cleanup",)

ROOT = Path(__file__).resolve().parent.parent
KAFKA_SCRIPT = ROOT / "deploy" / "kafka" / "kafka.py"
START_TIMEOUT = 240


@pytest.fixture(autouse=True)
def unfrozen_heap() -> Iterator[None]:
    """A test that settled the heap (`krabka.scale.heap`, a worker in the
    test's process) leaves nothing frozen; a module that froze the heap for
    all its tests (tests/faults/test_simulation.py) keeps it frozen."""
    frozen_before = gc.get_freeze_count()
    yield
    if not frozen_before:
        gc.unfreeze()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, object, object]:
    """A failed test's report ends with the last lines of every worker log
    written during it, the last started first (the CI report keeps only the
    first lines of a long report): a worker process's story is otherwise lost
    with the CI machine's temporary folders."""
    report = yield
    if isinstance(report, pytest.TestReport) and report.failed:
        harness = sys.modules.get("tests.app.test_app_harness")
        since = item.stash.get(_STARTED_AT, 0.0)
        for worker in reversed(getattr(harness, "STARTED", [])):
            try:
                if worker.log.stat().st_mtime >= since:
                    report.sections.append((f"worker {worker.member} (pid {worker.pid}), "
                                            "its log's last lines", worker.log_tail(80)))
            except OSError:
                continue
    return report


_STARTED_AT = pytest.StashKey[float]()


@pytest.fixture(autouse=True)
def _started_at(request: pytest.FixtureRequest) -> None:
    request.node.stash[_STARTED_AT] = time.time()


def _kafka(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(KAFKA_SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Bootstrap servers of a real broker: the configured one, or one started here."""
    configured = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if configured:
        yield configured
        return
    folder = tmp_path_factory.mktemp("kafka")
    try:
        started = _kafka("up", "--dir", str(folder), "--port", str(kafka_port()),
                         timeout=START_TIMEOUT)
        if started.returncode != 0:
            pytest.fail(
                f"the local Kafka broker did not start (exit {started.returncode}):\n"
                f"{started.stdout}\n{started.stderr}",
                pytrace=False,
            )
        yield started.stdout.strip().splitlines()[-1]
    finally:
        stopped = _kafka("down", "--dir", str(folder), timeout=120)
        if stopped.returncode != 0:
            print(f"stopping the local broker failed:\n{stopped.stderr}", file=sys.stderr)


@pytest.fixture(scope="session")
def secure_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureCluster]:
    """A local SASL_SSL broker with ACLs, started here and stopped by PID at the end."""
    folder = tmp_path_factory.mktemp("kafka-secure")
    try:
        started = _kafka("up", "--secure", "--user", "worker", "--user", "limited",
                         "--user", "term",
                         "--dir", str(folder), "--port", str(kafka_port()),
                         timeout=START_TIMEOUT)
        if started.returncode != 0:
            pytest.fail(
                f"the secured Kafka broker did not start (exit {started.returncode}):\n"
                f"{started.stdout}\n{started.stderr}",
                pytrace=False,
            )
        yield SecureCluster(folder, started.stdout.strip().splitlines()[-1])
    finally:
        stopped = _kafka("down", "--dir", str(folder), timeout=120)
        if stopped.returncode != 0:
            print(f"stopping the secured broker failed:\n{stopped.stderr}", file=sys.stderr)

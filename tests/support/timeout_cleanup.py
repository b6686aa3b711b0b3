"""A test that runs past the suite's timeout still stops what the suite started.

pytest-timeout's thread method (pyproject.toml says why the suite uses it)
dumps every thread's stack and ends the process with ``os._exit``, so no
fixture's teardown runs: the workers, services and brokers a hung test
started would stay running on the machine, and on CI's next job. Before that
exit, this plugin stops, by PID, every broker of ``deploy/kafka/kafka.py``
under the session's temporary directory (a broker runs in a session of its
own and outlives the script that started it) and every process the pytest
process started (its descendants).

Loaded by tests/conftest.py; a test runs it in a pytest of its own with
``-p tests.support.timeout_cleanup``.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import psutil
import pytest
import pytest_timeout

ROOT = Path(__file__).resolve().parents[2]
KAFKA_SCRIPT = ROOT / "deploy" / "kafka" / "kafka.py"
CHECKED_VERSION = "2.4.0"
"""The pytest-timeout whose ``timeout_timer`` (not part of its documented hooks)
this plugin calls once it has stopped the processes; tests/unit checks it."""


def stop_started(basetemp: Path | None) -> list[int]:
    """Stop the brokers under `basetemp`, then kill this process's descendants;
    the PIDs killed."""
    if basetemp is not None:
        for cluster in sorted({pid.parent.parent for pid in basetemp.glob("**/node-*/pid")}):
            # kafka.py checks each PID is still that node's broker before it signals it.
            subprocess.run([sys.executable, str(KAFKA_SCRIPT), "down", "--dir", str(cluster),
                            "--timeout", "10"], capture_output=True, timeout=60, check=False)
    children = psutil.Process().children(recursive=True)
    for child in children:
        with contextlib.suppress(psutil.Error):
            child.kill()
    psutil.wait_procs(children, timeout=10)
    return [child.pid for child in children]


_BASETEMP = pytest.StashKey[Path]()


@pytest.fixture(autouse=True, scope="session")
def _basetemp(request: pytest.FixtureRequest,
              tmp_path_factory: pytest.TempPathFactory) -> None:
    """Note the session's temporary directory, where the suite's brokers live,
    for the timer, which a hook starts and which has no fixtures."""
    request.config.stash[_BASETEMP] = tmp_path_factory.getbasetemp()


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> bool | None:
    """The thread method's timer, stopping the suite's processes before the exit."""
    if settings.method != "thread":
        return None  # the signal method raises in the test: its teardown runs

    def expired() -> None:
        if not settings.disable_debugger_detection and pytest_timeout.is_debugging():
            return  # pytest-timeout leaves a test under a debugger running, and so do we
        try:
            stopped = stop_started(item.config.stash.get(_BASETEMP, None))
            print(f"\ntimeout: stopped the processes the suite started: {stopped}",
                  file=sys.stderr, flush=True)
        finally:
            pytest_timeout.timeout_timer(item, settings)

    timer = threading.Timer(settings.timeout, expired)
    timer.name = f"timeout_cleanup {item.nodeid}"

    def cancel() -> None:
        timer.cancel()
        timer.join()

    item.cancel_timeout = cancel  # type: ignore[attr-defined]  # what pytest-timeout cancels
    timer.start()
    return True

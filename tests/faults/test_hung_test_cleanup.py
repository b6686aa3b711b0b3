"""A test that hangs past the suite's timeout leaves no process behind.

A pytest of its own runs one test that starts a broker (in a fixture) and a
child process, then hangs; the suite's timeout plugin must stop both, by PID,
before pytest-timeout's thread method ends that pytest without any teardown.
"""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest

from tests.support.timeout_cleanup import KAFKA_SCRIPT, ROOT

HUNG_TEST = '''
import os, subprocess, sys, threading
from pathlib import Path

import pytest

from tests.support.ports import kafka_port

KAFKA_SCRIPT = {kafka!r}


@pytest.fixture
def broker(tmp_path):
    folder = tmp_path / "kafka"
    subprocess.run([sys.executable, KAFKA_SCRIPT, "up", "--dir", str(folder),
                    "--port", str(kafka_port())], check=True, capture_output=True, timeout=240)
    pid = next(folder.glob("node-*/pid")).read_text()
    Path(os.environ["HUNG_OUT"], "broker").write_text(f"{{folder}} {{pid}}")
    return folder


def test_that_hangs(broker):
    child = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"])
    Path(os.environ["HUNG_OUT"], "child").write_text(str(child.pid))
    threading.Event().wait()  # the hang itself, which the timeout ends
'''


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.integration
@pytest.mark.own_brokers
def test_a_hung_test_has_its_broker_and_child_processes_stopped_at_the_timeout(tmp_path):
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "test_hung.py").write_text(HUNG_TEST.format(kafka=str(KAFKA_SCRIPT)))
    out = tmp_path / "out"
    out.mkdir()
    try:
        ended = subprocess.run(
            [sys.executable, "-m", "pytest", "-c", os.devnull, "--rootdir", str(inner),
             "-p", "no:cacheprovider", "-p", "tests.support.timeout_cleanup",
             "-o", "timeout=3", "-o", "timeout_method=thread", "-o", "timeout_func_only=true",
             "--basetemp", str(tmp_path / "basetemp"), str(inner / "test_hung.py")],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "HUNG_OUT": str(out)},
            capture_output=True, text=True, timeout=300, check=False)
        assert ended.returncode == 1, ended.stdout + ended.stderr  # pytest-timeout's exit
        assert "Timeout" in ended.stdout
        child = int((out / "child").read_text())
        broker_pid = int((out / "broker").read_text().split()[1])
        assert not _alive(child), "the hung test's child process was left running"
        assert not _alive(broker_pid), "the hung test's broker was left running"
    finally:
        if (out / "child").exists():
            pid = int((out / "child").read_text())
            if _alive(pid):
                psutil.Process(pid).kill()
        if (out / "broker").exists():
            subprocess.run([sys.executable, str(KAFKA_SCRIPT), "down", "--dir",
                            (out / "broker").read_text().split()[0]], capture_output=True,
                           timeout=120, check=False)

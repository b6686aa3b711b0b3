"""`make run` from a fresh clone: progress while it starts, a holder on the dashboard,
the leadership-change events as lines in the terminal, SIGTERM, nothing left.

The clone is ``git clone`` of this repository when the worker application is
committed, else a copy of the files git would commit (tracked and untracked,
not ignored). Two things are shared with this checkout instead of being
rebuilt, to keep the test to a minute: the Kafka jars (``.cache/kafka``) and
the Python environment (``make run PY=<this interpreter>`` with the clone's
venv marked installed). Everything else is the clone's own: its Makefile,
``deploy/run.py``, ``deploy/topics.py``, ``deploy/kafka/kafka.py``, and the app.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.app.test_app_harness import get_json, poll
from tests.support.ports import free_port, kafka_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
# agents.events.describe's line for an election: local time, holder, role, token.
ELECTED_LINE = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} \S+ leads 'demo' \(token \d+/\d+")


def _fresh_clone(target: Path) -> None:
    tracked = subprocess.run(["git", "ls-files", "--error-unmatch", "app/main.py"], cwd=ROOT,
                             capture_output=True, check=False)
    if tracked.returncode == 0:
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(target)], check=True)
        return
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=ROOT, capture_output=True, check=True)
    for name in filter(None, listed.stdout.decode().split("\0")):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_make_run_from_a_fresh_clone_starts_serves_and_stops_everything(tmp_path):
    clone = tmp_path / "clone"
    clone.mkdir()
    _fresh_clone(clone)
    jars = ROOT / ".cache" / "kafka"
    (clone / ".cache").mkdir(exist_ok=True)
    for version in jars.iterdir():
        if version.is_dir():
            (clone / ".cache" / "kafka").mkdir(exist_ok=True)
            (clone / ".cache" / "kafka" / version.name).symlink_to(version)
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".installed").touch()  # newer than the clone's pyproject.toml
    web_port, kafka_dir = free_port(also=(1, 2)), tmp_path / "kafka"  # three workers
    env = {k: v for k, v in os.environ.items() if not k.startswith("COORDINATION_")}
    env.pop("KAFKA_BOOTSTRAP_SERVERS", None)
    make = subprocess.Popen(
        ["make", "--no-print-directory", "run", f"VENV={venv}", f"PY={sys.executable}",
         f"KAFKA_DIR={kafka_dir}", f"KAFKA_PORT={kafka_port()}",
         f"RUN_ARGS=--web-port {web_port} --run-dir {tmp_path / 'run'} --partitions 4"],
        cwd=clone, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,  # like a terminal's foreground job: Ctrl-C hits the group
    )
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(make.stdout or []), daemon=True).start()
    worker_pids: list[int] = []
    try:
        try:
            url = poll(lambda: next((line.split("Dashboard: ")[1].strip() for line in lines
                                     if "Dashboard: " in line), None), 240, "the dashboard URL")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; it printed:\n{''.join(lines[-30:])}") from None
        # First, so that the workers are stopped whatever fails below.
        worker_pids.extend(int(pid) for line in lines if "[4/5] started 3 workers" in line
                           for pid in line.split("(pids ")[1].split(")")[0].split(", "))
        assert url == f"http://127.0.0.1:{web_port}/"
        started = time.monotonic()

        def holder() -> str | None:
            status, body = get_json(url + "roles/")
            rows = body.get("roles", []) if status == 200 else []
            return next((row["holder"] for row in rows
                         if row["role"] == "demo" and row["holder"]), None)

        poll(holder, 120, "a holder of the demo role on the dashboard")
        text = "".join(lines)
        steps = [text.find(f"[{n}/5] ") for n in range(1, 6)]
        assert -1 not in steps, text
        assert steps == sorted(steps), text  # each step, in order
        assert "Kafka jars: " in text
        assert "Kafka is up: bootstrap servers" in text
        assert len(re.findall(r"worker on port \d+ \(pid \d+\) is up", text)) == 3, text
        # The first election is printed before the dashboard is announced.
        elected = poll(lambda: next((line for line in lines if ELECTED_LINE.match(line)), None),
                       30, "an election event line")
        assert lines.index(elected) < next(i for i, line in enumerate(lines)
                                           if "Dashboard: " in line)
        print(f"\nmake run: dashboard with a holder {time.monotonic() - started:.1f} s after "
              "the URL was printed")
        assert len(worker_pids) == 3
        stop_started = time.monotonic()
        os.killpg(make.pid, signal.SIGTERM)
        # make itself is reaped here (a zombie would still count as a member).
        try:
            poll(lambda: make.poll() is not None and not _group_alive(make.pid), 60,
                 "make run's processes gone")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; it printed:\n{''.join(lines[-30:])}") from None
        poll(lambda: not any(_pid_alive(pid) for pid in worker_pids), 30, "the workers gone")
        status = subprocess.run([sys.executable, str(clone / "deploy" / "kafka" / "kafka.py"),
                                 "status", "--dir", str(kafka_dir)], capture_output=True,
                                check=False)
        assert status.returncode == 3, status.stdout  # 3: down
        text = "".join(lines)
        assert "stopping the workers" in text
        assert text.index("stopping the workers") < text.index("stopping the local Kafka broker")
        # A new user's terminal shows no error (a topic read before its partitions
        # had leaders once printed aiokafka's NotLeaderForPartitionError).
        assert not re.search(r"Error|Traceback", text), text
        # Nor do the workers' logs, though the broker is new (aiokafka's lines for
        # a group coordinator or internal topics not there yet are warnings).
        errors = [line for log in sorted((tmp_path / "run").glob("*.log"))
                  for line in log.read_text(errors="replace").splitlines()
                  if "[ERROR]" in line or "Traceback" in line]
        assert errors == [], "\n".join(errors[:20])
        print(f"make run stopped everything {time.monotonic() - stop_started:.1f} s after "
              "SIGTERM")
    finally:
        if _group_alive(make.pid):
            os.killpg(make.pid, signal.SIGKILL)
        for pid in worker_pids:  # each in its own session: the group kill misses them
            if _pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
        subprocess.run([sys.executable, str(ROOT / "deploy" / "kafka" / "kafka.py"), "down",
                        "--dir", str(kafka_dir)], capture_output=True, check=False)

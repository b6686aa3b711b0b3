"""Real processes for integration tests: started, followed by their JSON lines, stopped by PID."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SERVICE = ROOT / "examples" / "leader_service.py"


class Service:
    """One `examples/leader_service.py` process and the events it printed."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(SERVICE), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self.pid = self.process.pid
        self.events: list[dict[str, Any]] = []
        self._lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stdout(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            self.events.append(event)
            self._lines.put(event)

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr.append(line)

    def wait_for(self, event: str, timeout: float, **match: Any) -> dict[str, Any]:
        """The first event named `event` (matching `match`), waiting up to `timeout` s."""
        deadline = time.monotonic() + timeout
        for seen in list(self.events):
            if seen["event"] == event and all(seen.get(k) == v for k, v in match.items()):
                return seen
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                seen = self._lines.get(timeout=remaining)
            except queue.Empty:
                break
            if seen["event"] == event and all(seen.get(k) == v for k, v in match.items()):
                return seen
        raise AssertionError(
            f"no {event!r} event from pid {self.pid} within {timeout} s; events: "
            f"{[e['event'] for e in self.events][-10:]}; stderr tail: "
            f"{''.join(self.stderr[-20:])}"
        )

    def has(self, event: str) -> bool:
        """Whether the process has printed `event` so far."""
        return any(seen["event"] == event for seen in self.events)

    def signal(self, signum: int) -> None:
        """Send `signum` to the process."""
        os.kill(self.pid, signum)

    def stop(self, timeout: float = 15) -> int:
        """Stop the process by PID: SIGTERM, then SIGKILL; its exit code."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGCONT)
                os.kill(self.pid, signal.SIGTERM)
            try:
                return self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait(timeout)

"""Real processes for integration tests: started, followed by their JSON lines, stopped by PID."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SERVICE = ROOT / "examples" / "leader_service.py"


class Service:
    """One process printing JSON-line events, and the events it printed.

    By default `examples/leader_service.py`; `program` names another
    (e.g. ``["-m", "tests.faults.fault_member"]``) and `prefix` runs it under a
    command such as ``ip netns exec NAME`` (which execs it: same PID).
    """

    def __init__(
        self, *args: str, program: list[str] | None = None, prefix: list[str] | None = None
    ) -> None:
        self.process = subprocess.Popen(
            [*(prefix or []), sys.executable, *(program or [str(SERVICE)]), *args],
            cwd=ROOT,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self.pid = self.process.pid
        self.events: list[dict[str, Any]] = []
        self._printed = threading.Condition()
        self._closed = False
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
            with self._printed:
                self.events.append(event)
                self._printed.notify_all()
        with self._printed:
            self._closed = True
            self._printed.notify_all()

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr.append(line)

    def wait_for(
        self, event: str, timeout: float, *, since: int = 0, **match: Any
    ) -> dict[str, Any]:
        """The first event named `event` (matching `match`) at or after position
        `since` of `events`, waiting up to `timeout` s for it."""
        deadline = time.monotonic() + timeout
        with self._printed:
            while True:
                for seen in self.events[since:]:
                    if seen["event"] == event and all(seen.get(k) == v for k, v in match.items()):
                        return seen
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (self._closed and self.process.poll() is not None):
                    break
                self._printed.wait(remaining)
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
        """Stop the process by PID: SIGTERM, then SIGKILL; its exit code, once
        every event it printed is in `events`."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGCONT)
                os.kill(self.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
        code = self.process.wait(timeout)
        self._read_to_the_end(timeout)
        return code

    def _read_to_the_end(self, timeout: float) -> None:
        """Wait for the reader to reach the end of the exited process's output: the
        exit can be seen while its last lines are still in the pipe. Bounded: a
        child the process left behind can hold the pipe open."""
        deadline = time.monotonic() + timeout
        with self._printed:
            while not self._closed and (remaining := deadline - time.monotonic()) > 0:
                self._printed.wait(remaining)

"""Child processes of a benchmark run: started, followed, and always stopped by PID.

Every process the bench starts (brokers, candidate workers, the scale worker)
is registered here. `stop_all` stops each by its own PID (its process group
when it was started in a new session), SIGCONT first so a stopped process can
die, SIGTERM, then SIGKILL. The CLI calls it in a ``finally`` and from an
``atexit`` hook, so an exception or Ctrl-C never leaves anything running.
"""

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

_started: list[Child] = []
_lock = threading.Lock()


class Child:
    """One child process; its JSON stdout lines become `events`."""

    def __init__(self, argv: list[str], *, name: str, log: Path | None = None,
                 json_lines: bool = True, env: dict[str, str] | None = None,
                 new_session: bool = False) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log
        self._log = open(log, "ab") if log is not None else None  # noqa: SIM115
        self.json_lines = json_lines
        self.group = new_session
        full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
        self.process = subprocess.Popen(
            argv, stdout=subprocess.PIPE if json_lines else self._log or subprocess.DEVNULL,
            stderr=self._log or subprocess.DEVNULL, stdin=subprocess.DEVNULL,
            env=full_env, cwd=str(ROOT), start_new_session=new_session,
        )
        self.pid = self.process.pid
        self.events: list[dict[str, Any]] = []
        self._queue: queue.Queue[dict[str, Any]] = queue.Queue()
        with _lock:
            _started.append(self)
        if json_lines:
            threading.Thread(target=self._read, daemon=True, name=f"read {name}").start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            line = raw.decode("utf-8", "replace")
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                if self._log is not None:
                    self._log.write(raw)
                continue
            if not isinstance(event, dict):
                continue
            self.events.append(event)
            self._queue.put(event)

    def find(self, event: str, **match: Any) -> dict[str, Any] | None:
        for seen in list(self.events):
            if seen.get("event") == event and all(seen.get(k) == v for k, v in match.items()):
                return seen
        return None

    def wait_for(self, event: str, timeout: float, **match: Any) -> dict[str, Any]:
        """The first `event` line (matching `match`); `TimeoutError` after `timeout` s."""
        found = self.find(event, **match)
        if found is not None:
            return found
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                seen = self._queue.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                if self.process.poll() is not None and self._queue.empty():
                    found = self.find(event, **match)
                    if found is not None:
                        return found
                    raise ChildError(f"{self.name} (pid {self.pid}) exited with "
                                     f"{self.process.returncode} before {event!r}; "
                                     f"{self.tail()}") from None
                continue
            if seen.get("event") == event and all(seen.get(k) == v for k, v in match.items()):
                return seen
        raise TimeoutError(f"no {event!r} from {self.name} (pid {self.pid}) within "
                           f"{timeout:g} s; events {[e.get('event') for e in self.events][-8:]}; "
                           f"{self.tail()}")

    def tail(self, lines: int = 15) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "no log"
        text = self.log_path.read_text("utf-8", "replace").splitlines()[-lines:]
        return "log tail:\n" + "\n".join(text)

    def signal(self, signum: int) -> None:
        """Send `signum` to this child (only to its PID)."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """SIGCONT + SIGTERM, then SIGKILL after `timeout`; by PID (or its own group)."""
        if self.process.poll() is None:
            self._send(signal.SIGCONT)
            self._send(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._send(signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(10)
        elif self.group:
            # The leader exited; members of its own group may remain.
            self._send(signal.SIGKILL)
        if self._log is not None and not self._log.closed:
            self._log.close()

    def kill(self) -> None:
        self._send(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(10)

    def _send(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if self.group:
                os.killpg(self.pid, signum)
            else:
                os.kill(self.pid, signum)


class ChildError(RuntimeError):
    """A child exited when it should not have."""


def python(module: str, *args: str, name: str, log: Path, **kw: Any) -> Child:
    """Start ``python -m module args`` with this interpreter."""
    return Child([sys.executable, "-m", module, *args], name=name, log=log, **kw)


def stop_all() -> None:
    """Stop every child this process started that is still running, newest first."""
    with _lock:
        children = list(reversed(_started))
        _started.clear()
    for child in children:
        try:
            child.stop(timeout=5.0)
        except Exception as exc:  # best effort: go on with the others
            print(f"bench: could not stop {child.name} (pid {child.pid}): {exc!r}",
                  file=sys.stderr)


def forget(child: Child) -> None:
    """Drop a child that has been stopped from the registry."""
    with _lock:
        if child in _started:
            _started.remove(child)

"""The worker app (`app.main`) with three user roles, for the group-change fault run.

``faust -A tests.faults.group_changes_app worker`` runs the service's own app and
declares `ROLE_NAMES`. While a worker leads a role, the role's function:

- appends a ``start`` line when it begins and a ``stop`` line when it ends
  (cancelled, fenced or failed) to one append-only file shared by every
  worker, ``$GROUP_CHANGES_DIR/tenures.jsonl``: the role, member, pid,
  tenure, token and ``time.monotonic_ns()`` (CLOCK_MONOTONIC, one clock for
  every process of the machine, so the driver compares instants across
  processes). Each line is one ``write`` to an ``O_APPEND`` file, so lines
  of concurrent writers never interleave;
- makes one guarded write every `INTERVAL` seconds with `tests.faults.history`'s
  `HistoryWriter` to partition ``ROLE_NAMES.index(role)`` of
  ``$GROUP_CHANGES_OUTPUT``, journaled to ``$GROUP_CHANGES_DIR/journal-<pid>.jsonl``,
  so the history checker can say whether a deposed leader's write became
  visible.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

from app.main import app, context, installation, settings
from krabka import Leadership
from tests.faults.history import HistoryWriter

__all__ = ["ROLE_NAMES", "app", "context", "settings"]

ROLE_NAMES = ("gc.alpha", "gc.beta", "gc.gamma")
INTERVAL = 0.5
FOLDER = Path(os.environ.get("GROUP_CHANGES_DIR", "."))
OUTPUT = os.environ.get("GROUP_CHANGES_OUTPUT", "group-changes-output")

_journal: Any = None


def _journal_file() -> Any:
    global _journal
    if _journal is None:
        _journal = (FOLDER / f"journal-{os.getpid()}.jsonl").open("a")
    return _journal


def _mark(event: str, name: str, leadership: Leadership, reason: str = "") -> None:
    token = leadership.token
    line = json.dumps({
        "event": event, "role": name, "member": leadership.member, "pid": os.getpid(),
        "tenure": leadership.tenure, "producer_id": token.producer_id,
        "producer_epoch": token.producer_epoch, "mono_ns": time.monotonic_ns(),
        "wall_ms": time.time_ns() // 1_000_000, "reason": reason,
    }) + "\n"
    fd = os.open(FOLDER / "tenures.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _declare(name: str) -> None:
    partition = ROLE_NAMES.index(name)

    async def run(leadership: Leadership) -> None:
        writer = HistoryWriter(f"{leadership.member}.{os.getpid()}.{leadership.tenure}/{name}",
                               OUTPUT, partition, journal=_journal_file())
        _mark("start", name, leadership)
        reason = "returned"
        try:
            while True:
                await writer.write(leadership)
                await asyncio.sleep(INTERVAL)
        except asyncio.CancelledError:
            reason = "cancelled"
            raise
        except BaseException as exc:
            reason = repr(exc)
            raise
        finally:
            err = leadership.err
            _mark("stop", name, leadership, reason if err is None else f"{reason}: {err}")

    run.__name__ = f"role_{name.replace('.', '_')}"
    installation.role(name)(run)


for _name in ROLE_NAMES:
    _declare(_name)

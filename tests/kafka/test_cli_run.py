"""``krabka run`` and ``krabka elect`` against the real broker.

Each command ``krabka run`` starts here is a small Python program that
appends its start and its stop to a file: the kind, ``time.monotonic_ns()``
(one clock for every process of the machine), its PID, its parent's PID
and the fence deadline its environment gave, as monotonic ns. A command
stopped by SIGKILL writes no stop; the test notes when its PID was gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from krabka import describe_role_state
from krabka.kafka import KafkaTransport
from tests.support.kafka_io import compacted_state_and_terms_topics
from tests.support.polling import eventually
from tests.support.processes import Service

pytestmark = pytest.mark.integration

PARTITIONS = 4
LEASE = 3.0
RENEW = 0.5
STAGGER = 0.5
GRACE = 0.5
"""The default grace for this lease: min(2 s, margin / 2), the margin being lease / 3."""
CHANGES = 20
TAKEOVER_SLACK = 0.5
"""Seconds a takeover after SIGKILL may take beyond the lease and the
stagger, once the standby stands: room for a busy machine (the challenge's
own requests and the command's start fit in the stagger on a quiet one)."""
HANDOVER = 1.0
"""Seconds from SIGTERM to the successor's command start: the command's
stop, the resignation, the successor's election and its command's start."""

COMMAND = '''
import os, signal, sys, time

def note(kind):
    remaining = int(os.environ["KRABKA_FENCE_REMAINING_MS"])
    now = time.monotonic_ns()
    with open(sys.argv[1], "a") as out:
        out.write(f"{kind} {now} {os.getpid()} {os.getppid()} "
                  f"{now + remaining * 1_000_000} {os.environ['KRABKA_TOKEN']}\\n")

def stop(signum, frame):
    note("stop")
    os._exit(0)

signal.signal(signal.SIGTERM, signal.SIG_IGN if "ignore-term" in sys.argv else stop)
note("start")
while True:
    signal.pause()
'''


@dataclass
class Note:
    kind: str
    at: int
    pid: int
    parent: int
    deadline: int
    token: str


def notes(path: Path) -> list[Note]:
    if not path.exists():
        return []
    found = []
    for line in path.read_text().splitlines():
        kind, at, pid, parent, deadline, token = line.split(" ", 5)
        found.append(Note(kind, int(at), int(pid), int(parent), int(deadline), token))
    return found


def alive(pid: int) -> bool:
    """Whether `pid` still runs (a zombie has ended)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def _notes(path: Path) -> list[Note]:
    return notes(path)


async def _gone(pid: int) -> bool:
    return not alive(pid)


async def _copy(service: Service) -> list[dict]:
    return list(service.events)


async def _stderr(service: Service) -> str:
    return "".join(service.stderr)


@pytest.fixture
async def topics(kafka_bootstrap: str) -> tuple[str, str]:
    """A state topic and a terms topic of `PARTITIONS` partitions, both compacted."""
    return await compacted_state_and_terms_topics(kafka_bootstrap, PARTITIONS)


@pytest.fixture
def command(tmp_path: Path) -> Path:
    script = tmp_path / "command.py"
    script.write_text(COMMAND)
    return script


@pytest.fixture
def started() -> Iterator[list[Service]]:
    """Every krabka process a test starts; stopped by PID at its end, and so are
    the commands they ran (by the PIDs the commands noted)."""
    services: list[Service] = []
    yield services
    for service in services:
        service.stop()


def stop_commands(path: Path) -> None:
    for note in notes(path):
        if alive(note.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(note.pid, signal.SIGKILL)


def flags(kafka_bootstrap: str, topics: tuple[str, str], fencing: str) -> list[str]:
    state, terms = topics
    return ["--bootstrap-servers", kafka_bootstrap, "--topic", state, "--terms-topic", terms,
            "--partitions", str(PARTITIONS), "--fencing", fencing,
            "--lease-duration", str(LEASE), "--renew-interval", str(RENEW),
            "--challenge-stagger", str(STAGGER)]


def krabka_run(started: list[Service], role: str, member: str, common: list[str],
               command: list[str]) -> Service:
    service = Service("run", role, "--member", member, *common, "--", *command,
                      program=["-m", "krabka"])
    started.append(service)
    return service


async def registration(reader: KafkaTransport, role: str, member: str) -> int:
    """The offset of `member`'s latest registration for `role`, or -1."""
    state = await describe_role_state(reader, role, PARTITIONS)
    return max((entry.offset for entry in state.entries if entry.member == member), default=-1)


def running(path: Path) -> list[Note]:
    """The starts of the commands that still run."""
    ended = {note.pid for note in notes(path) if note.kind == "stop"}
    return [note for note in notes(path)
            if note.kind == "start" and note.pid not in ended and alive(note.pid)]


@pytest.mark.parametrize("fencing", ["epoch", "term"])
async def test_two_runs_of_a_role_never_run_their_commands_at_once(
        kafka_bootstrap, topics, command, tmp_path, started, fencing):
    role = f"test.run-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "commands"
    common = flags(kafka_bootstrap, topics, fencing)
    argv = [sys.executable, str(command), str(log)]
    slots = {member: krabka_run(started, role, member, common, argv) for member in ("a", "b")}
    reader = KafkaTransport(kafka_bootstrap, topic=topics[0], terms_topic=topics[1])
    await reader.start()
    # The end of each command that ended by SIGKILL, as the test saw it: no later than that.
    killed_at: dict[int, int] = {}
    try:
        first = await eventually(lambda: _notes(log), lambda seen: len(seen) >= 1, 60)
        assert [note.kind for note in first] == ["start"]
        for change in range(CHANGES):
            [leader] = running(log)
            member = next(name for name, service in slots.items()
                          if service.pid == leader.parent)
            how = signal.SIGKILL if change % 3 == 0 else signal.SIGTERM
            count = len([note for note in notes(log) if note.kind == "start"])
            signalled = time.monotonic_ns()
            slots[member].signal(how)
            if how == signal.SIGKILL:
                # The parent-death signal: the command ends with its krabka run.
                await eventually(lambda pid=leader.pid: _gone(pid), bool, 1.0)
                killed_at[leader.pid] = time.monotonic_ns()
                assert slots[member].process.wait(5) == -signal.SIGKILL
            else:
                assert slots[member].process.wait(10) == 128 + signal.SIGTERM, \
                    "".join(slots[member].stderr)
            later = await eventually(
                lambda: _notes(log),
                lambda seen, count=count: len([n for n in seen if n.kind == "start"]) > count,
                LEASE + STAGGER + TAKEOVER_SLACK + 5)
            successor = [note for note in later if note.kind == "start"][-1]
            assert successor.pid != leader.pid
            assert successor.parent != slots[member].pid
            took = (successor.at - signalled) / 1e9
            bound = LEASE + STAGGER + TAKEOVER_SLACK if how == signal.SIGKILL else HANDOVER
            assert took < bound, f"{how.name}: took over in {took:.2f} s"
            before = await registration(reader, role, member)
            slots[member] = krabka_run(started, role, member, common, argv)
            # The next change is timed against a standby that stands, not one starting.
            await eventually(lambda m=member: registration(reader, role, m),
                             lambda offset, before=before: offset > before, 60)
    finally:
        await reader.close()
        # The standby first, so that the leader's stop hands the role to nobody.
        for service in reversed(started):
            service.stop()
        stop_commands(log)
    starts = [note for note in notes(log) if note.kind == "start"]
    stops = {note.pid: note.at for note in notes(log) if note.kind == "stop"}
    stops.update(killed_at)
    assert len(starts) == CHANGES + 1
    intervals = sorted((start.at, stops[start.pid]) for start in starts if start.pid in stops)
    assert len(intervals) == len(starts)
    for (_, ended), (began, _) in itertools.pairwise(intervals):
        assert ended < began, "two commands of one role ran at once"
    tokens = [start.token for start in starts]
    assert len(set(tokens)) == len(tokens), "each command ran under a tenure of its own"


@pytest.mark.parametrize("fencing", ["epoch", "term"])
async def test_a_command_that_ignores_sigterm_is_killed_after_the_grace_and_before_its_deadline(
        kafka_bootstrap, topics, command, tmp_path, started, fencing):
    role = f"test.run-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "commands"
    runner = krabka_run(started, role, "a", flags(kafka_bootstrap, topics, fencing),
                        [sys.executable, str(command), str(log), "ignore-term"])
    try:
        [start] = await eventually(lambda: _notes(log), lambda seen: len(seen) >= 1, 60)
        signalled = time.monotonic_ns()
        runner.signal(signal.SIGTERM)
        await eventually(lambda: _gone(start.pid), bool, LEASE)
        gone = time.monotonic_ns()
        status = runner.process.wait(10)
    finally:
        runner.stop()
        stop_commands(log)
    assert [note.kind for note in notes(log)] == ["start"], "it ignored SIGTERM"
    assert gone - signalled >= GRACE * 1e9, "SIGKILL came before the grace was over"
    assert gone < start.deadline, "the command outlived the fence deadline it was given"
    assert status == 128 + signal.SIGTERM, "".join(runner.stderr)


async def test_run_with_on_exit_exit_ends_with_the_commands_status_and_resigns(
        kafka_bootstrap, topics, tmp_path, started):
    role = f"test.run-{uuid.uuid4().hex[:8]}"
    common = flags(kafka_bootstrap, topics, "epoch")
    runner = krabka_run(started, role, "a", [*common, "--on-exit", "exit"],
                        [sys.executable, "-c", "import os, sys; sys.exit(int("
                                                "os.environ['KRABKA_PRODUCER_EPOCH']) % 7 + 3)"])
    try:
        status = runner.process.wait(60)
    finally:
        runner.stop()
    assert 3 <= status < 10, "".join(runner.stderr)
    # Resigned: a second member is elected at once, not after the lease.
    elect = Service("elect", role, "--member", "b", *common, program=["-m", "krabka"])
    started.append(elect)
    began = time.monotonic()
    elect.wait_for("elected", 30, member="b")
    assert time.monotonic() - began < LEASE


async def test_run_serves_liveness_on_its_health_port_while_it_leads(
        kafka_bootstrap, topics, command, tmp_path, started):
    role = f"test.run-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "commands"
    runner = krabka_run(started, role, "a",
                        [*flags(kafka_bootstrap, topics, "epoch"), "--health-port", "0",
                         "--health-host", "127.0.0.1"],
                        [sys.executable, str(command), str(log)])
    try:
        said = await eventually(lambda: _stderr(runner), lambda err: "liveness on" in err, 60)
        port = int(said.split("liveness on 127.0.0.1:")[1].split()[0])
        await eventually(lambda: _notes(log), lambda seen: len(seen) >= 1, 60)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /health HTTP/1.1\r\nHost: probe\r\n\r\n")
        response = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        assert response.startswith(b"HTTP/1.1 200 OK\r\n"), response
        assert b'"healthy": true' in response
    finally:
        runner.signal(signal.SIGTERM)
        runner.process.wait(15)
        stop_commands(log)


async def test_elect_prints_its_election_and_on_sigint_resigns_and_exits_0(
        kafka_bootstrap, topics, started):
    role = f"test.elect-{uuid.uuid4().hex[:8]}"
    common = [*flags(kafka_bootstrap, topics, "epoch"), "--lease-duration", "30",
              "--renew-interval", "5"]
    first = Service("elect", role, "--member", "a", *common, program=["-m", "krabka"])
    started.append(first)
    elected = first.wait_for("elected", 60, member="a", role=role)
    second = Service("elect", role, "--member", "b", *common, program=["-m", "krabka"])
    started.append(second)
    await eventually(lambda: _stderr(second), lambda err: "stands for" in err, 30)
    first.signal(signal.SIGINT)
    assert first.process.wait(15) == 0, "".join(first.stderr)
    lost = first.wait_for("lost", 5, member="a")
    assert lost["reason"] == "stopped"
    assert lost["token"] == elected["token"]
    # The resignation lets the standby in now, long before the 30 s lease would lapse.
    taken = second.wait_for("elected", 15, member="b")
    assert taken["token"] != elected["token"]


async def test_elect_observe_prints_the_holder_at_each_change(kafka_bootstrap, topics,
                                                              started):
    role = f"test.elect-{uuid.uuid4().hex[:8]}"
    common = flags(kafka_bootstrap, topics, "epoch")
    observer = Service("elect", "--observe", role, *common, program=["-m", "krabka"])
    started.append(observer)
    await eventually(lambda: _stderr(observer), lambda err: "observing" in err, 30)
    member = Service("elect", role, "--member", "a", *common, program=["-m", "krabka"])
    started.append(member)
    elected = member.wait_for("elected", 60, member="a")
    member.signal(signal.SIGTERM)
    assert member.process.wait(15) == 0, "".join(member.stderr)
    seen = await eventually(lambda: _copy(observer), lambda lines: len(lines) >= 2, 15)
    assert [(line["holder"], line["kind"]) for line in seen] == [("a", "elected"),
                                                                  (None, "resigned")]
    assert seen[0]["token"] == elected["token"]
    assert {line["role"] for line in seen} == {role}

"""The operator CLI, ``python -m krabka``, against the real broker."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import signal
import subprocess
import sys
import time
import uuid

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from krabka import FencedError, acquire_leadership
from krabka.kafka import KafkaTransport
from tests.support.polling import eventually
from tests.support.ports import free_port
from tests.support.processes import ROOT, Service

pytestmark = pytest.mark.integration

PARTITIONS = 4


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "krabka", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, check=False)


@pytest.fixture
async def state_topic(kafka_bootstrap):
    topic = f"state-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(topic, PARTITIONS, 1, topic_configs={"cleanup.policy": "compact"})])
    finally:
        await admin.close()
    return topic


async def lead(transport: KafkaTransport, role: str):
    return await acquire_leadership(transport, role, "worker-1", partitions=PARTITIONS,
                                    lease_duration=10, renew_interval=2, challenge_stagger=1)


@pytest.fixture
async def leader(kafka_bootstrap, state_topic):
    async with KafkaTransport(kafka_bootstrap, topic=state_topic) as transport:
        leadership = await lead(transport, f"test.cli-{uuid.uuid4().hex[:8]}")
        yield leadership
        await leadership.resign()


def test_describe_reports_no_token_for_a_role_never_taken(kafka_bootstrap):
    result = cli("describe", "never.taken", "--bootstrap-servers", kafka_bootstrap)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"role": "never.taken", "state": "Unknown", "token": None}


def test_describe_reports_the_leaders_token(kafka_bootstrap, leader):
    result = cli("describe", leader.role, "--bootstrap-servers", kafka_bootstrap)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["token"] == {
        "producer_id": leader.token.producer_id, "producer_epoch": leader.token.producer_epoch}


def test_state_reports_the_roster_and_the_lease(kafka_bootstrap, state_topic, leader):
    result = cli("state", leader.role, "--topic", state_topic, "--partitions", str(PARTITIONS),
                 "--bootstrap-servers", kafka_bootstrap)
    assert result.returncode == 0, result.stderr
    state = json.loads(result.stdout)
    assert [entry["member"] for entry in state["roster"]] == ["worker-1"]
    assert state["lease"]["member"] == "worker-1"
    assert state["lease"]["tenure"] == leader.tenure


def test_state_with_a_wrong_partition_count_says_what_to_fix(kafka_bootstrap, state_topic):
    result = cli("state", "any.role", "--topic", state_topic, "--partitions", "16",
                 "--bootstrap-servers", kafka_bootstrap)
    assert result.returncode == 1
    assert "partitions" in result.stderr


async def test_fence_deposes_the_current_holder_at_once(kafka_bootstrap, state_topic, leader):
    result = cli("fence", leader.role, "--bootstrap-servers", kafka_bootstrap)
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["fenced"] == {"producer_id": leader.token.producer_id,
                                "producer_epoch": leader.token.producer_epoch}
    with pytest.raises(FencedError):
        async with leader.transaction() as txn:
            await txn.send(state_topic, b"never visible", partition=0)


def test_an_unreachable_broker_is_a_clear_error_within_30_seconds():
    closed_port = free_port()
    started = time.monotonic()
    result = cli("describe", "any.role", "--bootstrap-servers", f"127.0.0.1:{closed_port}")
    assert time.monotonic() - started < 30
    assert result.returncode == 2
    assert f"127.0.0.1:{closed_port}" in result.stderr


def test_a_missing_command_is_a_usage_error():
    result = cli()
    assert result.returncode == 2
    assert "usage" in result.stderr


def test_roles_lists_the_leaders_role_with_its_holder_and_token(kafka_bootstrap, state_topic,
                                                                leader):
    result = cli("roles", "--topic", state_topic, "--partitions", str(PARTITIONS),
                 "--bootstrap-servers", kafka_bootstrap)
    assert result.returncode == 0, result.stderr
    rows = {row["role"]: row for row in json.loads(result.stdout)["roles"]}
    assert rows[leader.role] == {
        "role": leader.role, "holder": "worker-1", "status": "held", "members": 1,
        "deadline": rows[leader.role]["deadline"],
        "token": {"producer_id": leader.token.producer_id,
                  "producer_epoch": leader.token.producer_epoch}}
    assert rows[leader.role]["deadline"] > json.loads(result.stdout)["now"]


def test_roles_on_a_terminal_is_a_table(kafka_bootstrap, state_topic, leader):
    controller, terminal = pty.openpty()
    try:
        process = subprocess.run(
            [sys.executable, "-m", "krabka", "roles", "--topic", state_topic,
             "--partitions", str(PARTITIONS), "--bootstrap-servers", kafka_bootstrap],
            stdout=terminal, stderr=subprocess.PIPE, cwd=ROOT, timeout=60, check=False)
        os.close(terminal)
        terminal = -1
        printed = b""
        while chunk := _read_pty(controller):
            printed += chunk
    finally:
        os.close(controller)
        if terminal >= 0:
            os.close(terminal)
    assert process.returncode == 0, process.stderr
    lines = printed.decode().splitlines()
    assert lines[0].split() == ["ROLE", "HOLDER", "TOKEN", "DEADLINE", "STATUS", "MEMBERS"]
    row = next(line.split() for line in lines[1:] if line.startswith(leader.role))
    assert row[1:3] == ["worker-1", f"{leader.token.producer_id}/{leader.token.producer_epoch}"]
    assert row[4:] == ["held", "1"]


def _read_pty(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError:  # EIO: the terminal's other end is closed and drained
        return b""


async def test_watch_prints_an_election_and_a_resignation_as_they_happen(
        kafka_bootstrap, state_topic, monkeypatch):
    # Into a pipe, as a log shipper reads it: Python buffers a pipe unless told not to.
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    role = f"test.watch-{uuid.uuid4().hex[:8]}"
    watcher = Service("watch", role, "--topic", state_topic, "--partitions", str(PARTITIONS),
                      "--bootstrap-servers", kafka_bootstrap,
                      program=["-m", "krabka"])
    try:
        await eventually(lambda: _lines(watcher.stderr), lambda err: "following" in err, 30)
        async with KafkaTransport(kafka_bootstrap, topic=state_topic) as transport:
            leadership = await lead(transport, role)
            await leadership.resign()
        events = await eventually(lambda: _copy(watcher.events), lambda seen: len(seen) >= 4,
                                  20)
    finally:
        status = watcher.stop()
    assert [(e["kind"], e["member"]) for e in events] == [
        ("member-joined", "worker-1"), ("elected", "worker-1"), ("resigned", "worker-1"),
        ("member-left", "worker-1")]
    assert {e["role"] for e in events} == {role}
    token = {"producer_id": leadership.token.producer_id,
             "producer_epoch": leadership.token.producer_epoch}
    assert events[1]["token"] == events[2]["token"] == token
    assert events[1]["tenure"] == leadership.tenure
    assert status == 0, "".join(watcher.stderr)


async def test_watch_stops_on_sigint_with_status_0(kafka_bootstrap, state_topic):
    watcher = Service("watch", "--topic", state_topic, "--partitions", str(PARTITIONS),
                      "--bootstrap-servers", kafka_bootstrap, program=["-m", "krabka"])
    try:
        await eventually(lambda: _lines(watcher.stderr), lambda err: "following" in err, 30)
        watcher.signal(signal.SIGINT)
        status = watcher.process.wait(15)
    finally:
        watcher.stop()
    assert status == 0, "".join(watcher.stderr)


async def test_watch_ends_with_status_0_when_its_reader_goes_away(kafka_bootstrap,
                                                                   state_topic, tmp_path):
    role = f"test.watch-{uuid.uuid4().hex[:8]}"
    errors = tmp_path / "stderr"
    read_end, write_end = os.pipe()
    with errors.open("w") as stderr:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "krabka", "watch", role, "--topic", state_topic,
            "--partitions", str(PARTITIONS), "--bootstrap-servers", kafka_bootstrap,
            stdout=write_end, stderr=stderr, cwd=ROOT)
    # As `watch | head -0` would: the first event finds no reader.
    os.close(write_end)
    os.close(read_end)
    try:
        await eventually(lambda: _read(errors), lambda err: "following" in err, 30)
        async with KafkaTransport(kafka_bootstrap, topic=state_topic) as transport:
            leadership = await lead(transport, role)
            await leadership.resign()
        status = await asyncio.wait_for(process.wait(), 20)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert status == 0, errors.read_text()
    assert "Traceback" not in errors.read_text()


async def _read(path) -> str:
    return path.read_text()


async def _lines(lines: list[str]) -> str:
    return "".join(lines)


async def _copy(events: list[dict]) -> list[dict]:
    return list(events)

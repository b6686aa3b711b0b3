"""``krabka run --health-port``: the liveness answer a probe gets over HTTP.

200 while the runner is healthy, 503 with the reasons while it leads with its
renewal overdue past the tolerance; a client that never finishes its request
head, or sends too much of one, is dropped without an answer. The server
listens on an ephemeral port of the loopback interface.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

import pytest

from krabka.cli.health_server import MAX_HEAD, HealthServer
from krabka.health import LeadershipHealth
from krabka.runner import RunnerState


@dataclass
class _Tenure:
    overdue: float

    def renewal_overdue(self) -> float:
        return self.overdue


@dataclass
class _Runner:
    """What `LeadershipHealth` reads of a runner: its state and tenure."""

    state: RunnerState
    leadership: _Tenure | None
    role: str = "billing"
    member: str = "m1"


async def _get(port: int, request: bytes = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n") -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


def _split(response: bytes) -> tuple[int, dict[str, object]]:
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), json.loads(body)


@pytest.fixture
async def served():
    runner = _Runner(RunnerState.LEADING, _Tenure(overdue=0.0))
    server = HealthServer(LeadershipHealth([runner], tolerance=2.0), "127.0.0.1", 0)  # type: ignore[list-item]
    await server.start()
    try:
        yield runner, server.port
    finally:
        await server.stop()


async def test_a_leader_renewing_on_time_answers_200(served):
    _, port = served
    status, body = _split(await _get(port))
    assert status == 200
    assert body == {"healthy": True, "reasons": [], "tolerance": 2.0}


async def test_a_leader_overdue_past_the_tolerance_answers_503_naming_the_role(served):
    runner, port = served
    runner.leadership = _Tenure(overdue=3.5)
    status, body = _split(await _get(port))
    assert status == 503
    assert body["healthy"] is False
    assert body["reasons"] == ["role 'billing' is led by 'm1' but its renewal is "
                               "3.5 s overdue (tolerance 2 s)"]


async def test_the_answer_follows_the_runner_from_one_request_to_the_next(served):
    runner, port = served
    runner.leadership = _Tenure(overdue=3.5)
    assert _split(await _get(port))[0] == 503
    runner.leadership = _Tenure(overdue=0.1)
    assert _split(await _get(port))[0] == 200


async def test_a_runner_that_does_not_lead_answers_200_however_late_its_last_renewal(served):
    runner, port = served
    runner.state = RunnerState.CAMPAIGNING
    runner.leadership = _Tenure(overdue=100.0)
    assert _split(await _get(port))[0] == 200


async def test_a_request_head_larger_than_the_limit_gets_no_answer(served):
    _, port = served
    response = await _get(port, b"GET /" + b"x" * (MAX_HEAD * 2) + b" HTTP/1.1\r\n\r\n")
    assert response == b""


async def test_a_client_that_closes_before_its_head_ends_gets_no_answer(served):
    _, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /health HTTP/1.1\r\n")
    writer.write_eof()
    assert await asyncio.wait_for(reader.read(), 10) == b""
    writer.close()

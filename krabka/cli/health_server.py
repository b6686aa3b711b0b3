"""``krabka run --health-port``: a liveness endpoint that answers for the runner.

Any path answers ``GET`` with 200 while `LeadershipHealth` finds the runner
healthy and 503 while it leads with its renewal overdue past the tolerance;
the body is one JSON object (``healthy``, ``reasons``, ``tolerance``). A
Kubernetes ``httpGet`` liveness probe, or ``curl --fail``, needs nothing more.

Written on asyncio's streams because the library depends on no HTTP
framework and a probe needs only a status line: the server reads the
request head (at most `MAX_HEAD` bytes, within `READ_TIMEOUT` seconds),
answers once and closes the connection.
"""

from __future__ import annotations

import asyncio
import json
import logging
from http import HTTPStatus

from krabka.health import LeadershipHealth

__all__ = ["MAX_HEAD", "READ_TIMEOUT", "HealthServer", "answer"]

log = logging.getLogger("krabka.cli.health")

MAX_HEAD = 8192
"""Bytes of request line and headers read before the server gives up on a client."""
READ_TIMEOUT = 5.0
"""Seconds a client has to send its request head."""


def answer(health: LeadershipHealth) -> bytes:
    """The whole HTTP/1.1 response for the health as of now."""
    report = health.check()
    status = HTTPStatus.OK if report.healthy else HTTPStatus.SERVICE_UNAVAILABLE
    body = json.dumps({"healthy": report.healthy, "reasons": list(report.reasons),
                       "tolerance": report.tolerance}).encode() + b"\n"
    head = (f"HTTP/1.1 {status.value} {status.phrase}\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n")
    return head.encode("ascii") + body


class HealthServer:
    """Serves `health` on ``host:port`` between `start` and `stop`."""

    def __init__(self, health: LeadershipHealth, host: str, port: int) -> None:
        self._health = health
        self._host = host
        self._port = port
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        """The port it listens on (the one the system chose when asked for 0)."""
        if self._server is None:
            return self._port
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        """Listen; an address in use raises `OSError` here, before any campaign."""
        self._server = await asyncio.start_server(self._serve, self._host, self._port,
                                                  limit=MAX_HEAD)

    async def stop(self) -> None:
        """Stop listening and close every connection."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT)
            writer.write(answer(self._health))
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError,
                ConnectionError) as exc:
            log.debug("health client dropped: %r", exc)
        finally:
            writer.close()

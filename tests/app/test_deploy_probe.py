"""deploy/probe.py, the image's health check, against a local HTTP server."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from deploy import probe
from tests.support.ports import free_port


class Answers(BaseHTTPRequestHandler):
    """200 on /health, 503 with a reason on /ready, 404 elsewhere."""

    def do_GET(self) -> None:
        status, body = {"/health": (200, b'{"member": "m"}'),
                        "/ready": (503, b'{"ready": false, "reason": "fold behind"}'),
                        }.get(self.path, (404, b"{}"))
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:  # keep the test output quiet
        pass


@pytest.fixture
def port() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Answers)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_the_url_follows_the_worker_settings():
    assert probe.url({}) == "http://127.0.0.1:6066/health"
    env = {"COORDINATION_WEB_BIND": "0.0.0.0", "COORDINATION_WEB_PORT": "7000"}
    assert probe.url(env, "/ready") == "http://127.0.0.1:7000/ready"
    assert probe.url({"COORDINATION_WEB_BIND": "::"}) == "http://127.0.0.1:6066/health"
    # A worker bound to one address is asked on that address.
    assert probe.url({"COORDINATION_WEB_BIND": "10.1.2.3"}) == "http://10.1.2.3:6066/health"
    assert probe.url({"COORDINATION_WEB_BIND": "fd00::1"}) == "http://[fd00::1]:6066/health"


def test_a_2xx_answer_is_healthy(port):
    assert probe.main([], {"COORDINATION_WEB_PORT": str(port)}) == 0
    assert probe.main(["/health"], {"COORDINATION_WEB_PORT": str(port)}) == 0


def test_another_answer_is_unhealthy_with_the_reason(port, capsys):
    assert probe.main(["/ready"], {"COORDINATION_WEB_PORT": str(port)}) == 1
    assert "answered 503" in capsys.readouterr().err
    assert "fold behind" in probe.check(f"http://127.0.0.1:{port}/ready")
    assert probe.main(["/nowhere"], {"COORDINATION_WEB_PORT": str(port)}) == 1


def test_no_server_is_unhealthy(capsys):
    assert probe.main([], {"COORDINATION_WEB_PORT": str(free_port())}) == 1
    assert "did not answer" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["health"], ["/health", "/ready"]])
def test_a_bad_command_line_is_a_usage_error(argv, capsys):
    assert probe.main(argv, {}) == 2
    assert "usage" in capsys.readouterr().err

"""deploy/kafka/kafka.py without a broker (the session fixture starts the real one).

The CLI is run as the Makefile runs it; its pure parts are imported from its
modules (`deploy.kafka.*`).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.kafka.cluster import Cluster
from deploy.kafka.security import client_settings, scram_arguments
from deploy.kafka.storage import server_properties
from deploy.kafka.wire import api_versions_ok, metadata_brokers

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "kafka" / "kafka.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_status_of_an_empty_dir_exits_3(tmp_path: Path) -> None:
    done = run("status", "--dir", str(tmp_path))
    assert done.returncode == 3, done
    assert "no cluster" in done.stdout


def test_down_of_an_empty_dir_exits_0(tmp_path: Path) -> None:
    done = run("down", "--dir", str(tmp_path))
    assert done.returncode == 0, done


def test_node_commands_need_a_cluster(tmp_path: Path) -> None:
    for command in ("kill", "start-node"):
        done = run(command, "--dir", str(tmp_path), "--node", "1")
        assert done.returncode == 1, done
        assert "no cluster" in done.stderr


def test_only_one_or_three_nodes(tmp_path: Path) -> None:
    done = run("up", "--dir", str(tmp_path), "--nodes", "2")
    assert done.returncode == 2
    assert not (tmp_path / "cluster.json").exists()


def test_three_node_properties(tmp_path: Path) -> None:
    cluster = Cluster(str(tmp_path), 3, 19092, "id", "512m", None, 19192)
    props = [
        dict(line.split("=", 1) for line in text.splitlines() if not line.startswith("#"))
        for text in (server_properties(cluster, node) for node in (1, 2, 3))
    ]
    assert [p["node.id"] for p in props] == ["1", "2", "3"]
    assert {p["controller.quorum.voters"] for p in props} == {
        "1@127.0.0.1:19192,2@127.0.0.1:19193,3@127.0.0.1:19194"
    }
    assert props[1]["listeners"] == "PLAINTEXT://127.0.0.1:19093,CONTROLLER://127.0.0.1:19193"
    assert len({p["log.dirs"] for p in props}) == 3
    for p in props:
        assert p["transaction.state.log.replication.factor"] == "3"
        assert p["transaction.state.log.min.isr"] == "2"
        assert p["auto.create.topics.enable"] == "false"
        assert p["transaction.abort.timed.out.transaction.cleanup.interval.ms"] == "1000"
    assert cluster.bootstrap() == "127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094"


def test_single_node_replication_is_one(tmp_path: Path) -> None:
    cluster = Cluster(str(tmp_path), 1, 19092, "id", "512m", None, 19192)
    text = server_properties(cluster, 1)
    assert "transaction.state.log.replication.factor=1\n" in text
    assert "transaction.state.log.min.isr=1\n" in text
    assert "offsets.topic.replication.factor=1\n" in text


@pytest.fixture
def silent_listener() -> Iterator[int]:
    """A TCP port that accepts connections and never speaks Kafka."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(timeout=5)
    server.close()


def test_readiness_is_a_kafka_request_not_a_port_check(silent_listener: int) -> None:
    assert not api_versions_ok(silent_listener)
    assert metadata_brokers(silent_listener) is None


def test_a_secure_cluster_has_only_a_sasl_ssl_listener_and_the_authorizer(
        tmp_path: Path) -> None:
    cluster = Cluster(str(tmp_path), 1, 19092, "id", "512m", None, 19192,
                      secure=True, users=("worker",))
    folder = cluster.secure_dir()
    folder.mkdir()
    for name in ("store", "admin", "worker"):
        (folder / f"{name}.password").write_text(f"{name}-secret\n")
    text = server_properties(cluster, 1)
    props = dict(line.split("=", 1) for line in text.splitlines() if not line.startswith("#"))
    assert props["listeners"] == "SASL_SSL://127.0.0.1:19092,CONTROLLER://127.0.0.1:19192"
    assert props["listener.security.protocol.map"] == "CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL"
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert props["authorizer.class.name"].endswith("StandardAuthorizer")
    assert props["allow.everyone.if.no.acl.found"] == "false"
    jaas = props["listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"]
    assert 'username="admin" password="admin-secret"' in jaas
    assert scram_arguments(cluster) == [
        "--add-scram", "SCRAM-SHA-512=[name=admin,password=admin-secret]",
        "--add-scram", "SCRAM-SHA-512=[name=worker,password=worker-secret]"]
    assert client_settings(cluster, "worker")["KAFKA_SASL_PASSWORD_FILE"] == str(
        folder / "worker.password")


def test_users_need_a_secure_cluster(tmp_path: Path) -> None:
    done = run("up", "--dir", str(tmp_path), "--user", "worker")
    assert done.returncode == 1
    assert "--user needs --secure" in done.stderr
    assert not (tmp_path / "cluster.json").exists()

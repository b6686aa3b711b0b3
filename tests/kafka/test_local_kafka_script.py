"""deploy/kafka/kafka.py without a broker (the session fixture starts the real one).

The CLI is run as the Makefile runs it; its pure parts are imported from its
modules (`deploy.kafka.*`).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.kafka.cluster import Cluster
from deploy.kafka.errors import KafkaScriptError
from deploy.kafka.probe import (
    PROBE_TIMEOUT,
    answering,
    connection,
    metadata_brokers,
    node_ready,
)
from deploy.kafka.security import client_settings, scram_arguments
from deploy.kafka.storage import server_properties

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "kafka" / "kafka.py"


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
    )


def test_status_of_an_empty_dir_exits_3(tmp_path: Path) -> None:
    done = run("status", "--dir", str(tmp_path))
    assert done.returncode == 3, done
    assert "no cluster" in done.stdout


def test_the_script_finds_its_modules_from_any_working_directory(tmp_path: Path) -> None:
    done = run("status", "--dir", "cluster", cwd=tmp_path)
    assert done.returncode == 3, done
    assert "no cluster in cluster" in done.stdout


def test_help_lists_every_command() -> None:
    done = run("--help")
    assert done.returncode == 0, done
    assert "{up,down,status,features,kill,start-node}" in done.stdout


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


def listener(*, answer: bool) -> Iterator[int]:
    """A TCP port that accepts connections and never speaks Kafka: it closes
    each one at once, or (`answer` False) holds it open and says nothing."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()
    held: list[socket.socket] = []

    def serve() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            if answer:
                conn.close()
            else:
                held.append(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(timeout=5)
    for conn in held:
        conn.close()
    server.close()


@pytest.fixture
def closing_listener() -> Iterator[int]:
    yield from listener(answer=True)


@pytest.fixture
def mute_listener() -> Iterator[int]:
    yield from listener(answer=False)


def cluster_on(folder: Path, port: int) -> Cluster:
    return Cluster(str(folder), 1, port, "id", "512m", None, 19192)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_readiness_is_a_kafka_request_not_a_port_check(
        closing_listener: int, tmp_path: Path) -> None:
    cluster = cluster_on(tmp_path, closing_listener)
    assert metadata_brokers(cluster, 1) is None
    assert not answering(cluster, 1)
    assert not node_ready(cluster, 1, {1})


def test_a_node_that_never_answers_is_not_ready_within_the_probe_timeout(
        mute_listener: int, tmp_path: Path) -> None:
    started = time.monotonic()
    assert metadata_brokers(cluster_on(tmp_path, mute_listener), 1) is None
    assert time.monotonic() - started < PROBE_TIMEOUT + 1


def test_a_node_nobody_listens_for_is_not_ready(tmp_path: Path) -> None:
    assert not answering(cluster_on(tmp_path, free_port()), 1)


def test_the_probes_of_a_secure_cluster_log_in_as_admin_with_its_client_settings(
        tmp_path: Path) -> None:
    cluster = Cluster(str(tmp_path), 1, 19092, "id", "512m", None, 19192,
                      secure=True, users=("worker",))
    folder = cluster.secure_dir()
    folder.mkdir()
    (folder / "ca.pem").write_text("not read here\n")
    (folder / "admin.password").write_text("admin-secret\n")
    settings = connection(cluster)
    assert settings.bootstrap_servers == "127.0.0.1:19092"
    assert settings.security_protocol == "SASL_SSL"
    assert settings.sasl_mechanism == "SCRAM-SHA-512"
    assert settings.sasl_username == "admin"
    assert settings.password() == "admin-secret"
    assert settings.ssl_cafile == str(folder / "ca.pem")
    assert settings.ssl_check_hostname


def test_a_secure_cluster_without_its_secrets_is_a_clear_error(tmp_path: Path) -> None:
    cluster = Cluster(str(tmp_path), 1, 19092, "id", "512m", None, 19192, secure=True)
    with pytest.raises(KafkaScriptError, match="KAFKA_SASL_PASSWORD_FILE"):
        connection(cluster)


def test_a_plaintext_clusters_probes_use_no_tls_and_no_login(tmp_path: Path) -> None:
    assert connection(cluster_on(tmp_path, 19092)).client_options() == {
        "security_protocol": "PLAINTEXT"}


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

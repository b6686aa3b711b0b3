"""The servers a run needs: Kafka (deploy/kafka/kafka.py), etcd and ZooKeeper.

Each is started on loopback in the run's temporary folder and stopped by PID
at the end (Kafka through ``kafka.py down``, which stops the JVMs it started
by their PIDs; etcd and ZooKeeper as children of this process). Peers whose
binaries or Python clients are missing are skipped with a reason.
"""

from __future__ import annotations

import contextlib
import importlib.util
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from bench.procs import ROOT, Child

KAFKA_SCRIPT = ROOT / "deploy" / "kafka" / "kafka.py"
ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")


@dataclass
class Ports:
    kafka: int = 59092
    etcd: int = 52379
    etcd_peer: int = 52380
    zookeeper: int = 52181


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _need_free(port: int, what: str) -> None:
    if not port_free(port):
        raise RuntimeError(f"port {port} for {what} is taken (another process of someone "
                           "else's?): pick another with the bench's port options")


# --------------------------------------------------------------------------- Kafka


class Kafka:
    """A single-node broker from the Maven jars, in `folder`."""

    def __init__(self, folder: Path, port: int) -> None:
        self.folder = folder
        self.port = port
        self.bootstrap = ""
        self.started = False

    def start(self) -> str:
        _need_free(self.port, "Kafka")
        _need_free(self.port + 100, "Kafka's controller")
        self.started = True  # `down` is safe on a half-started folder
        done = subprocess.run(
            [sys.executable, str(KAFKA_SCRIPT), "up", "--dir", str(self.folder),
             "--port", str(self.port), "--heap", "1g", "--timeout", "180"],
            capture_output=True, text=True, timeout=300, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"Kafka did not start:\n{done.stdout}\n{done.stderr}")
        self.bootstrap = done.stdout.strip().splitlines()[-1]
        return self.bootstrap

    def pids(self) -> list[int]:
        found = []
        for pid_file in self.folder.glob("node-*/pid"):
            with contextlib.suppress(ValueError, OSError):
                found.append(int(pid_file.read_text().strip()))
        return found

    def stop(self) -> None:
        if not self.started:
            return
        self.started = False
        done = subprocess.run(
            [sys.executable, str(KAFKA_SCRIPT), "down", "--dir", str(self.folder),
             "--timeout", "30"], capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            print(f"bench: stopping Kafka failed: {done.stderr}", file=sys.stderr)


# --------------------------------------------------------------------------- peers


# The Debian package of each peer's server (`bench.install_peers` installs them).
PEER_PACKAGES = {"etcd": "etcd-server", "zookeeper": "zookeeper"}


def server_missing(peer: str) -> str | None:
    """Why `peer`'s server is not on this machine, or None."""
    if peer == "etcd":
        if shutil.which("etcd") is None:
            return f"no `etcd` binary (Debian package {PEER_PACKAGES['etcd']})"
        return None
    if not ZOOKEEPER_JAR.exists():
        return f"no {ZOOKEEPER_JAR} (Debian package {PEER_PACKAGES['zookeeper']})"
    if shutil.which("java") is None:
        return "no `java`"
    return None


def etcd_missing() -> str | None:
    """Why the etcd peer cannot run here, or None."""
    reason = server_missing("etcd")
    if reason is not None:
        return reason
    for module in ("etcd3", "google.protobuf"):
        if importlib.util.find_spec(module.split(".")[0]) is None:
            return f"Python module {module} missing (pip install -e '.[bench]')"
    return None


def zookeeper_missing() -> str | None:
    """Why the ZooKeeper peer cannot run here, or None."""
    reason = server_missing("zookeeper")
    if reason is not None:
        return reason
    if importlib.util.find_spec("kazoo") is None:
        return "Python module kazoo missing (pip install -e '.[bench]')"
    return None


def etcd_version() -> str:
    try:
        out = subprocess.run(["etcd", "--version"], capture_output=True, text=True,
                             timeout=10, check=False).stdout
    except OSError:
        return "?"
    return out.splitlines()[0].split(":")[-1].strip() if out else "?"


def zookeeper_version() -> str:
    jars = sorted(ZOOKEEPER_JAR.parent.glob("zookeeper-3*.jar"))
    return jars[0].stem.removeprefix("zookeeper-") if jars else "?"


class Etcd:
    """One etcd member on loopback, data in `folder`."""

    def __init__(self, folder: Path, port: int, peer_port: int) -> None:
        self.folder = folder
        self.port = port
        self.peer_port = peer_port
        self.child: Child | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> str:
        _need_free(self.port, "etcd")
        _need_free(self.peer_port, "etcd's peer port")
        self.folder.mkdir(parents=True, exist_ok=True)
        client, peer = f"http://127.0.0.1:{self.port}", f"http://127.0.0.1:{self.peer_port}"
        self.child = Child(
            ["etcd", "--name", "bench", "--data-dir", str(self.folder / "data"),
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"bench={peer}", "--initial-cluster-state", "new",
             "--log-level", "warn"],
            name="etcd", log=self.folder / "etcd.log", json_lines=False)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.child.alive():
                raise RuntimeError(f"etcd exited: {self.child.tail()}")
            with contextlib.suppress(OSError), urllib.request.urlopen(
                    f"{client}/health", timeout=1) as answer:
                if b'"true"' in answer.read():
                    return self.endpoint
            time.sleep(0.2)
        raise RuntimeError(f"etcd not healthy within {timeout} s: {self.child.tail()}")

    def stop(self) -> None:
        if self.child is not None:
            self.child.stop()


class ZooKeeper:
    """A standalone ZooKeeper on loopback; tickTime 200 ms so a 3 s session is allowed."""

    def __init__(self, folder: Path, port: int, tick_ms: int = 200) -> None:
        self.folder = folder
        self.port = port
        self.tick_ms = tick_ms
        self.child: Child | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def config(self) -> str:
        return "\n".join([
            f"tickTime={self.tick_ms}",
            f"dataDir={self.folder / 'data'}",
            f"clientPort={self.port}",
            "clientPortAddress=127.0.0.1",
            f"minSessionTimeout={2 * self.tick_ms}",
            f"maxSessionTimeout={200 * self.tick_ms}",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,cons",
            "maxClientCnxns=0",
            "",
        ])

    def start(self, timeout: float = 60) -> str:
        _need_free(self.port, "ZooKeeper")
        (self.folder / "data").mkdir(parents=True, exist_ok=True)
        cfg = self.folder / "zoo.cfg"
        cfg.write_text(self.config())
        self.child = Child(
            ["java", "-Xmx512m", "-cp", f"{ZOOKEEPER_JAR}:/etc/zookeeper/conf",
             "-Dzookeeper.admin.enableServer=false",
             "org.apache.zookeeper.server.ZooKeeperServerMain", str(cfg)],
            name="zookeeper", log=self.folder / "zookeeper.log", json_lines=False)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.child.alive():
                raise RuntimeError(f"ZooKeeper exited: {self.child.tail()}")
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"ruok")
                if sock.recv(16) == b"imok":
                    return self.endpoint
            time.sleep(0.2)
        raise RuntimeError(f"ZooKeeper not ready within {timeout} s: {self.child.tail()}")

    def stop(self) -> None:
        if self.child is not None:
            self.child.stop()


@dataclass(frozen=True)
class ZkSession:
    """One session as the server's ``cons`` lists it."""

    session: str
    """Its id in hex (``0x...``)."""
    last_response: int
    """``lresp``: when the server last answered it, in ms of the server's
    elapsed-time clock (Java's nanoTime, which on Linux is CLOCK_MONOTONIC, the
    clock of Python's `time.monotonic` on the same machine)."""
    timeout_ms: int
    """``to``: the negotiated session timeout."""

    def expiry(self, tick_ms: int) -> int:
        """When the server expires the session if it hears nothing more, on the same
        clock: ZooKeeper's expiry queue files a session it hears from at ``now +
        timeout`` rounded up to the next tick (``ExpiryQueue.roundToNextInterval``)."""
        return ((self.last_response + self.timeout_ms) // tick_ms + 1) * tick_ms


_CONS_SESSION = re.compile(r"sid=(0x[0-9a-f]+),.*?\bto=(\d+),.*?\blresp=(\d+)")


def parse_cons(text: str) -> dict[str, ZkSession]:
    """The sessions of a ``cons`` answer, by id (connections without one are left out)."""
    found = {}
    for match in _CONS_SESSION.finditer(text):
        session, timeout, response = match.groups()
        found[session] = ZkSession(session, int(response), int(timeout))
    return found


def zookeeper_sessions(endpoint: str) -> dict[str, ZkSession]:
    """The server's ``cons``: every connected session, by id."""
    host, port = endpoint.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(b"cons")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return parse_cons(answer.decode("utf-8", "replace"))

#!/usr/bin/env python3
"""Local Apache Kafka brokers (KRaft, combined broker+controller) from Maven jars.

These machines have no Docker, so development and the test suite run Kafka from
the jars `deploy/kafka/fetch-jars.sh` copies out of Maven Central into
`.cache/kafka/<version>/jars`: `java -cp '<jars>/*' kafka.Kafka server.properties`,
one JVM per node, each in its own process group (a terminal's Ctrl-C does not
reach it; `down` stops it). Standard library only.

    kafka.py up     --dir DIR [--port 9092] [--nodes 1|3] [--controller-port P]
                    [--host 127.0.0.1] [--transaction-version N] [--heap 512m]
                    [--secure [--user NAME ...]] [--timeout 90]
    kafka.py down   --dir DIR [--timeout 30]
    kafka.py status --dir DIR                       (exit 0 all up, 3 otherwise)
    kafka.py kill   --dir DIR --node N [--signal KILL|TERM|STOP|CONT]
    kafka.py start-node --dir DIR --node N [--timeout 90]
    kafka.py features --dir DIR                     (finalized feature levels)

Layout of DIR: `cluster.json` (written once the storage is formatted),
`node-N/server.properties`, `node-N/data` (log.dirs), `node-N/server.log`
(the JVM's stdout and stderr, appended across restarts) and `node-N/pid`.
Node N (1-based) serves clients on port+N-1 and its controller on
controller-port+N-1 (controller-port defaults to port+100).
Clients reach the brokers at --host (listened on and advertised; default
127.0.0.1, e.g. a veth address that a network namespace can reach); the
controllers always listen on 127.0.0.1.
`up` prints the bootstrap servers as its last stdout line once every node
answers a real Kafka request (Metadata listing every node as an unfenced broker).

`up --secure` formats a secured cluster instead: clients reach a SASL_SSL
listener (TLS with a certificate made at format time by the JDK's `keytool`,
SCRAM-SHA-512 users created at format time: `admin`, a super user, and each
`--user NAME`), and Kafka's StandardAuthorizer refuses what no ACL allows.
The controllers stay on plaintext loopback; their principal (ANONYMOUS) is a
super user, as the brokers' requests to them need. DIR/secure holds the CA
(`ca.pem` for clients), the keystores, one `NAME.password` file per user and
`client.env`, the admin's client settings as KAFKA_* variable lines, which
`up` also prints before the bootstrap line.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import hmac
import itertools
import json
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

KAFKA_VERSION = "4.4.0"
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
JARS = ROOT / ".cache" / "kafka" / KAFKA_VERSION / "jars"
LOG4J2 = HERE / "log4j2.properties"
CONTROLLER_PORT_OFFSET = 100
EXIT_DOWN = 3
TAIL_LINES = 30


class KafkaScriptError(Exception):
    """A failure worth one clear message (and the log tail when there is one)."""


class NodeFailed(KafkaScriptError):
    """A node exited or stayed unready during start-up."""

    def __init__(self, node: int, message: str) -> None:
        super().__init__(message)
        self.node = node


# --------------------------------------------------------------------------- cluster


@dataclass(frozen=True)
class Cluster:
    """What `up` formatted in DIR; saved as DIR/cluster.json."""

    dir: str
    nodes: int
    port: int
    cluster_id: str
    heap: str
    transaction_version: int | None
    controller_port_base: int
    host: str = "127.0.0.1"  # the brokers' listener; a cluster.json without it is loopback
    secure: bool = False  # SASL_SSL with SCRAM users and ACLs (a cluster.json without it: no)
    users: tuple[str, ...] = ()  # SCRAM users besides ADMIN (secure only)

    def node_ids(self) -> range:
        return range(1, self.nodes + 1)

    def broker_port(self, node: int) -> int:
        return self.port + node - 1

    def controller_port(self, node: int) -> int:
        return self.controller_port_base + node - 1

    def bootstrap(self) -> str:
        return ",".join(f"{self.host}:{self.broker_port(n)}" for n in self.node_ids())

    def node_dir(self, node: int) -> Path:
        return Path(self.dir) / f"node-{node}"

    def log_path(self, node: int) -> Path:
        return self.node_dir(node) / "server.log"

    def pid_path(self, node: int) -> Path:
        return self.node_dir(node) / "pid"

    def props_path(self, node: int) -> Path:
        return self.node_dir(node) / "server.properties"

    def secure_dir(self) -> Path:
        return Path(self.dir) / "secure"


def cluster_file(directory: Path) -> Path:
    return directory / "cluster.json"


def load_cluster(directory: Path) -> Cluster | None:
    path = cluster_file(directory)
    if not path.exists():
        return None
    saved = json.loads(path.read_text())
    saved["users"] = tuple(saved.get("users", ()))
    return Cluster(**saved)


def save_cluster(cluster: Cluster) -> None:
    path = cluster_file(Path(cluster.dir))
    path.write_text(json.dumps(asdict(cluster), indent=2) + "\n")


def server_properties(cluster: Cluster, node: int) -> str:
    """The broker+controller settings of one node (see docs/design.md#the-kafka-adapter)."""
    replication = min(cluster.nodes, 3)
    min_isr = 1 if cluster.nodes == 1 else 2
    voters = ",".join(f"{n}@127.0.0.1:{cluster.controller_port(n)}" for n in cluster.node_ids())
    plain, ctrl = cluster.broker_port(node), cluster.controller_port(node)
    client = "SASL_SSL" if cluster.secure else "PLAINTEXT"
    listeners = f"{client}://{cluster.host}:{plain},CONTROLLER://127.0.0.1:{ctrl}"
    settings: dict[str, object] = {
        "process.roles": "broker,controller",
        "node.id": node,
        "controller.quorum.voters": voters,
        "listeners": listeners,
        "advertised.listeners": listeners,
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": client,
        "listener.security.protocol.map": f"CONTROLLER:PLAINTEXT,{client}:{client}",
        "log.dirs": cluster.node_dir(node) / "data",
        "num.partitions": 1,
        "default.replication.factor": replication,
        "auto.create.topics.enable": "false",
        "offsets.topic.replication.factor": replication,
        "offsets.topic.num.partitions": 4,
        "transaction.state.log.replication.factor": replication,
        "transaction.state.log.min.isr": min_isr,
        "transaction.state.log.num.partitions": 4,
        "share.coordinator.state.topic.replication.factor": replication,
        "share.coordinator.state.topic.min.isr": min_isr,
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000,
        "group.initial.rebalance.delay.ms": 0,
        "log.cleaner.backoff.ms": 1000,
        # The default 128 MiB dedupe buffer is most of a small heap.
        "log.cleaner.dedupe.buffer.size": 16 * 1024 * 1024,
    }
    if cluster.secure:
        settings.update(secure_properties(cluster))
    lines = [f"# Written by deploy/kafka/kafka.py for node {node} of {cluster.dir}"]
    lines += [f"{key}={value}" for key, value in settings.items()]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- security


ADMIN = "admin"
SCRAM = "SCRAM-SHA-512"
CERT_DAYS = 30


def secure_properties(cluster: Cluster) -> dict[str, object]:
    """SASL_SSL for clients and between brokers, SCRAM-SHA-512, the StandardAuthorizer."""
    folder = cluster.secure_dir()
    store_password = read_secret(folder / "store.password")
    admin_password = read_secret(folder / f"{ADMIN}.password")
    jaas = (f'org.apache.kafka.common.security.scram.ScramLoginModule required '
            f'username="{ADMIN}" password="{admin_password}";')
    return {
        "sasl.enabled.mechanisms": SCRAM,
        "sasl.mechanism.inter.broker.protocol": SCRAM,
        f"listener.name.sasl_ssl.{SCRAM.lower()}.sasl.jaas.config": jaas,
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": folder / "broker.p12",
        "ssl.keystore.password": store_password,
        "ssl.truststore.type": "PKCS12",
        "ssl.truststore.location": folder / "truststore.p12",
        "ssl.truststore.password": store_password,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        # ANONYMOUS is the principal of the plaintext controller listener only
        # (loopback): the brokers' registrations and heartbeats need it.
        "super.users": f"User:{ADMIN};User:ANONYMOUS",
        "allow.everyone.if.no.acl.found": "false",
    }


def read_secret(path: Path) -> str:
    return path.read_text().strip()


def write_secret(path: Path, value: str) -> None:
    path.write_text(value + "\n")
    path.chmod(0o600)


def keytool(*args: str) -> None:
    home = os.environ.get("JAVA_HOME")
    tool = str(Path(home) / "bin" / "keytool") if home else shutil.which("keytool")
    if not tool:
        raise KafkaScriptError("keytool not found (install a JDK 17+ or set JAVA_HOME)")
    done = subprocess.run([tool, *args], capture_output=True, text=True, timeout=60,
                          check=False)
    if done.returncode != 0:
        raise KafkaScriptError(f"keytool {args[0]} failed:\n{done.stdout}{done.stderr}")


def make_secrets(cluster: Cluster) -> None:
    """A CA, the brokers' keystore it signs (SAN: localhost, 127.0.0.1 and --host),
    a truststore, the CA as PEM for clients, and a random password per user."""
    folder = cluster.secure_dir()
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    folder.chmod(0o700)
    password = secrets.token_hex(16)
    write_secret(folder / "store.password", password)
    for user in (ADMIN, *cluster.users):
        write_secret(folder / f"{user}.password", secrets.token_hex(16))
    store = ("-storetype", "PKCS12", "-storepass", password)
    ca, broker = str(folder / "ca.p12"), str(folder / "broker.p12")
    sans = {"dns:localhost", "ip:127.0.0.1"}
    sans.add(f"ip:{cluster.host}" if re.fullmatch(r"[0-9.]+", cluster.host)
             else f"dns:{cluster.host}")
    san = "SAN=" + ",".join(sorted(sans))
    days = ("-validity", str(CERT_DAYS))
    keytool("-genkeypair", "-alias", "ca", "-keyalg", "EC", "-dname", "CN=kafka.py local CA",
            "-ext", "bc:c", *days, "-keystore", ca, *store)
    keytool("-exportcert", "-rfc", "-alias", "ca", "-file", str(folder / "ca.pem"),
            "-keystore", ca, *store)
    keytool("-genkeypair", "-alias", "broker", "-keyalg", "EC", "-dname", "CN=localhost",
            "-ext", san, *days, "-keystore", broker, *store)
    keytool("-certreq", "-alias", "broker", "-file", str(folder / "broker.csr"),
            "-keystore", broker, *store)
    keytool("-gencert", "-alias", "ca", "-infile", str(folder / "broker.csr"), "-rfc",
            "-outfile", str(folder / "broker.pem"), "-ext", san, *days, "-keystore", ca, *store)
    for keystore in (broker, str(folder / "truststore.p12")):
        keytool("-importcert", "-noprompt", "-alias", "ca", "-file", str(folder / "ca.pem"),
                "-keystore", keystore, *store)
    keytool("-importcert", "-alias", "broker", "-file", str(folder / "broker.pem"),
            "-keystore", broker, *store)
    (folder / "client.env").write_text("".join(f"{k}={v}\n" for k, v in
                                               client_settings(cluster, ADMIN).items()))


def client_settings(cluster: Cluster, user: str) -> dict[str, str]:
    """The KAFKA_* variables a client of the secured cluster sets, as `user`."""
    folder = cluster.secure_dir()
    return {
        "KAFKA_BOOTSTRAP_SERVERS": cluster.bootstrap(),
        "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "KAFKA_SASL_MECHANISM": SCRAM,
        "KAFKA_SASL_USERNAME": user,
        "KAFKA_SASL_PASSWORD_FILE": str(folder / f"{user}.password"),
        "KAFKA_SSL_CAFILE": str(folder / "ca.pem"),
    }


def scram_arguments(cluster: Cluster) -> list[str]:
    """StorageTool's --add-scram for every user (SCRAM credentials live in the metadata log)."""
    args = []
    for user in (ADMIN, *cluster.users):
        password = read_secret(cluster.secure_dir() / f"{user}.password")
        args += ["--add-scram", f"{SCRAM}=[name={user},password={password}]"]
    return args


class Wire:
    """How kafka.py's own probes reach a broker: plaintext, or TLS plus SCRAM as admin."""

    def __init__(self, cluster: Cluster) -> None:
        self.context: ssl.SSLContext | None = None
        self.password: str | None = None
        if cluster.secure:
            folder = cluster.secure_dir()
            self.context = ssl.create_default_context(cafile=str(folder / "ca.pem"))
            self.password = read_secret(folder / f"{ADMIN}.password")

    def open(self, host: str, port: int, timeout: float, *, authenticate: bool) -> socket.socket:
        sock = socket.create_connection((host, port), timeout=timeout)
        try:
            if self.context is not None:
                sock = self.context.wrap_socket(sock, server_hostname=host)
            if authenticate and self.password is not None:
                scram_login(sock, ADMIN, self.password)
        except BaseException:
            sock.close()
            raise
        return sock


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def scram_login(sock: socket.socket, user: str, password: str) -> None:
    """SaslHandshake v1 and SCRAM-SHA-512 (RFC 5802) through SaslAuthenticate v0.

    By hand because the standard library has no Kafka client; kafka.py uses it
    only to know when a secured broker is ready.
    """
    (error,) = struct.unpack_from(">h", exchange(sock, 17, 1, _string(SCRAM)))
    if error:
        raise ConnectionError(f"SaslHandshake {SCRAM}: error {error}")
    nonce = secrets.token_urlsafe(18)
    first_bare = f"n={user},r={nonce}"
    server_first = _sasl_step(sock, ("n,," + first_bare).encode()).decode()
    fields = dict(item.split("=", 1) for item in server_first.split(","))
    if not fields["r"].startswith(nonce):
        raise ConnectionError("SCRAM: the server's nonce does not extend ours")
    salted = hashlib.pbkdf2_hmac("sha512", password.encode(), base64.b64decode(fields["s"]),
                                 int(fields["i"]))
    client_key = hmac.digest(salted, b"Client Key", "sha512")
    final_bare = f"c=biws,r={fields['r']}"
    message = f"{first_bare},{server_first},{final_bare}".encode()
    signature = hmac.digest(hashlib.sha512(client_key).digest(), message, "sha512")
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    _sasl_step(sock, f"{final_bare},p={base64.b64encode(proof).decode()}".encode())


def _sasl_step(sock: socket.socket, data: bytes) -> bytes:
    body = exchange(sock, 36, 0, struct.pack(">i", len(data)) + data)
    error, message_len = struct.unpack_from(">hh", body)
    offset = 4 + max(message_len, 0)
    if error:
        raise ConnectionError(f"SaslAuthenticate: error {error} "
                              f"{body[4:offset].decode(errors='replace')}")
    (size,) = struct.unpack_from(">i", body, offset)
    return body[offset + 4 : offset + 4 + size]


# --------------------------------------------------------------------------- java


def java_binary() -> str:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise KafkaScriptError("java not found (install a JDK 17+ or set JAVA_HOME)")
    return java


def ensure_jars() -> Path:
    """The jars folder, fetched first (fetch-jars.sh) when it is not complete."""
    if not (JARS / ".complete").exists():
        script = HERE / "fetch-jars.sh"
        done = subprocess.run(["bash", str(script)], stdout=sys.stderr, check=False)
        if done.returncode != 0:
            raise KafkaScriptError(f"{script} failed (exit {done.returncode})")
    return JARS


def java_command(main: str, *args: str, heap: str = "256m") -> list[str]:
    return [
        java_binary(),
        f"-Xmx{heap}",
        # kafka-run-class.sh's defaults; start-up measured no slower than SerialGC.
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-XX:InitiatingHeapOccupancyPercent=35",
        "-XX:+ExplicitGCInvokesConcurrent",
        "-XX:+ExitOnOutOfMemoryError",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile=file:{LOG4J2}",
        "-cp",
        f"{ensure_jars()}/*",
        main,
        *args,
    ]


def run_tool(*args: str, timeout: float = 60) -> str:
    """Run kafka.tools.StorageTool; return its output, raise with it on failure."""
    cmd = java_command("kafka.tools.StorageTool", *args)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-TAIL_LINES:])
        raise KafkaScriptError(f"StorageTool {args[0]} failed (exit {done.returncode}):\n{tail}")
    return done.stdout


def random_cluster_id() -> str:
    out = run_tool("random-uuid")
    ids = [line for line in out.split() if re.fullmatch(r"[A-Za-z0-9_-]{22}", line)]
    if not ids:
        raise KafkaScriptError(f"StorageTool random-uuid printed no id:\n{out}")
    return ids[-1]


def format_storage(cluster: Cluster) -> None:
    """Write each node's properties and format its storage (all nodes in parallel)."""
    procs = []
    for node in cluster.node_ids():
        node_dir = cluster.node_dir(node)
        shutil.rmtree(node_dir / "data", ignore_errors=True)  # a half-done earlier `up`
        node_dir.mkdir(parents=True, exist_ok=True)
        cluster.props_path(node).write_text(server_properties(cluster, node))
        args = ["format", "-t", cluster.cluster_id, "-c", str(cluster.props_path(node))]
        if cluster.transaction_version is not None:
            args += ["--feature", f"transaction.version={cluster.transaction_version}"]
        if cluster.secure:
            args += scram_arguments(cluster)
        cmd = java_command("kafka.tools.StorageTool", *args)
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    failures = []
    for node, proc in zip(cluster.node_ids(), procs, strict=True):
        out, _ = proc.communicate(timeout=120)
        if proc.returncode != 0:
            tail = "\n".join(out.decode(errors="replace").splitlines()[-TAIL_LINES:])
            failures.append(f"format of node {node} failed (exit {proc.returncode}):\n{tail}")
    if failures:
        raise KafkaScriptError("\n".join(failures))


# --------------------------------------------------------------------------- processes


def read_pid(cluster: Cluster, node: int) -> int | None:
    try:
        return int(cluster.pid_path(node).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def is_our_broker(cluster: Cluster, node: int, pid: int) -> bool:
    """The pid is alive (not a zombie) and runs this node's kafka.Kafka (no pid reuse)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reap it if it was our own child
    for _ in range(50):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            return False
        if state in ("Z", "X"):
            return False
        if cmdline != [b""]:
            return b"kafka.Kafka" in cmdline and str(cluster.props_path(node)).encode() in cmdline
        time.sleep(0.01)  # a JVM that is just starting shows an empty cmdline for a moment
    return False


def running_pid(cluster: Cluster, node: int) -> int | None:
    pid = read_pid(cluster, node)
    return pid if pid is not None and is_our_broker(cluster, node, pid) else None


def check_ports_free(cluster: Cluster, node: int) -> None:
    for host, port in ((cluster.host, cluster.broker_port(node)),
                       ("127.0.0.1", cluster.controller_port(node))):
        with socket.socket() as sock:
            # As the broker does: connections in TIME_WAIT do not block a listener.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
            except OSError as exc:
                raise KafkaScriptError(
                    f"port {port} (node {node}) is in use: another broker? ({exc.strerror})"
                ) from None


def launch(cluster: Cluster, node: int) -> int:
    """Start one node in its own process group; return its pid."""
    check_ports_free(cluster, node)
    cmd = java_command("kafka.Kafka", str(cluster.props_path(node)), heap=cluster.heap)
    cmd.insert(1, f"-Dkafka.logs.dir={cluster.node_dir(node)}")
    with cluster.log_path(node).open("ab") as log:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        log.write(f"===== kafka.py: starting node {node} at {stamp} =====\n".encode())
        log.flush()
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cluster.node_dir(node),
            start_new_session=True,
        )
    cluster.pid_path(node).write_text(f"{proc.pid}\n")
    return proc.pid


def signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)  # start_new_session: the group id is the pid


def wait_gone(cluster: Cluster, node: int, pid: int, deadline: float) -> bool:
    while time.monotonic() < deadline:
        if not is_our_broker(cluster, node, pid):
            return True
        time.sleep(0.1)
    return not is_our_broker(cluster, node, pid)


def stop_nodes(cluster: Cluster, nodes: list[int], timeout: float) -> None:
    """SIGTERM every listed node at once, wait, then SIGKILL the stragglers' groups."""
    pids = {n: pid for n in nodes if (pid := running_pid(cluster, n)) is not None}
    for pid in pids.values():
        signal_group(pid, signal.SIGTERM)
        signal_group(pid, signal.SIGCONT)  # a SIGSTOPped node cannot act on SIGTERM
    deadline = time.monotonic() + timeout
    for node, pid in pids.items():
        if not wait_gone(cluster, node, pid, deadline):
            print(f"node {node} (pid {pid}) ignored SIGTERM; sending SIGKILL", file=sys.stderr)
            signal_group(pid, signal.SIGKILL)
            wait_gone(cluster, node, pid, time.monotonic() + 10)
    for node in nodes:
        if running_pid(cluster, node) is None:
            cluster.pid_path(node).unlink(missing_ok=True)


def log_tail(cluster: Cluster, node: int, lines: int = TAIL_LINES) -> str:
    try:
        text = cluster.log_path(node).read_text(errors="replace")
    except FileNotFoundError:
        return "(no log yet)"
    return "\n".join(text.splitlines()[-lines:])


# --------------------------------------------------------------------------- protocol


_correlation = itertools.count(1)


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("connection closed by the broker")
        data += chunk
    return bytes(data)


def exchange(sock: socket.socket, api_key: int, version: int, body: bytes, *,
             flexible: bool = False) -> bytes:
    """Send one request (header v1, or v2 when flexible) on `sock`; return the body.

    The response header is v0 (correlation id only); ApiVersions always answers so.
    """
    correlation = next(_correlation)
    header = struct.pack(">hhih", api_key, version, correlation, 8) + b"kafka.py"
    if flexible:
        header += b"\x00"  # no tagged fields
    message = header + body
    sock.sendall(struct.pack(">i", len(message)) + message)
    (size,) = struct.unpack(">i", _recv_exact(sock, 4))
    response = _recv_exact(sock, size)
    if struct.unpack(">i", response[:4])[0] != correlation:
        raise ConnectionError("correlation id mismatch")
    return response[4:]


def kafka_request(
    port: int,
    api_key: int,
    version: int,
    body: bytes,
    *,
    flexible: bool = False,
    timeout: float = 2.0,
    host: str = "127.0.0.1",
    wire: Wire | None = None,
) -> bytes:
    """One request on a new connection to host:port (through `wire` when secured;
    ApiVersions, key 18, is answered before SASL, every other request after it)."""
    if wire is None:
        sock = socket.create_connection((host, port), timeout=timeout)
    else:
        sock = wire.open(host, port, timeout, authenticate=api_key != 18)
    with sock:
        return exchange(sock, api_key, version, body, flexible=flexible)


def api_versions_ok(port: int, host: str = "127.0.0.1", wire: Wire | None = None) -> bool:
    """ApiVersions v0 (supported by every broker, before any negotiation)."""
    try:
        body = kafka_request(port, 18, 0, b"", host=host, wire=wire)
        error_code: int = struct.unpack_from(">h", body)[0]
    except (OSError, struct.error):
        return False
    return error_code == 0


def metadata_brokers(port: int, host: str = "127.0.0.1", wire: Wire | None = None
                     ) -> set[int] | None:
    """Node ids of the unfenced brokers a node reports (Metadata v4, no topics)."""
    try:
        body = kafka_request(port, 3, 4, struct.pack(">ib", -1, 0), host=host, wire=wire)
        offset = 4  # throttle_time_ms
        (count,) = struct.unpack_from(">i", body, offset)
        offset += 4
        brokers = set()
        for _ in range(count):
            node_id, host_len = struct.unpack_from(">ih", body, offset)
            offset += 6 + host_len + 4  # host, port
            (rack_len,) = struct.unpack_from(">h", body, offset)
            offset += 2 + max(rack_len, 0)
            brokers.add(node_id)
    except (OSError, struct.error):
        return None
    return brokers


def node_ready(cluster: Cluster, node: int, expect: set[int]) -> bool:
    """The node answers Metadata and lists every node in `expect` as a broker."""
    brokers = metadata_brokers(cluster.broker_port(node), cluster.host, Wire(cluster))
    return brokers is not None and expect <= brokers


def _uvarint(data: bytes, offset: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, offset
        shift += 7


def _skip_tags(data: bytes, offset: int) -> int:
    count, offset = _uvarint(data, offset)
    for _ in range(count):
        _, offset = _uvarint(data, offset)
        size, offset = _uvarint(data, offset)
        offset += size
    return offset


def finalized_features(port: int, host: str = "127.0.0.1", wire: Wire | None = None
                       ) -> dict[str, int]:
    """Finalized feature levels (max) from ApiVersions v3's tagged field 2."""
    software = b"\x09kafka.py\x02" + b"0"  # compact strings: name, version
    body = kafka_request(port, 18, 3, software + b"\x00", flexible=True, host=host,
                         wire=wire)
    offset = 2  # error_code
    count, offset = _uvarint(body, offset)
    for _ in range(count - 1):
        offset = _skip_tags(body, offset + 6)
    offset += 4  # throttle_time_ms
    tags, offset = _uvarint(body, offset)
    features: dict[str, int] = {}
    for _ in range(tags):
        tag, offset = _uvarint(body, offset)
        size, offset = _uvarint(body, offset)
        if tag == 2:
            features = _parse_features(body[offset : offset + size])
        offset += size
    return features


def _parse_features(data: bytes) -> dict[str, int]:
    count, offset = _uvarint(data, 0)
    features = {}
    for _ in range(count - 1):
        length, offset = _uvarint(data, offset)
        name = data[offset : offset + length - 1].decode()
        offset += length - 1
        (max_level,) = struct.unpack_from(">h", data, offset)
        offset = _skip_tags(data, offset + 4)
        features[name] = max_level
    return features


# --------------------------------------------------------------------------- commands


def wait_ready(cluster: Cluster, nodes: list[int], expect: set[int], timeout: float) -> None:
    """Poll until every listed node is ready; fail fast when one of them exits."""
    deadline = time.monotonic() + timeout
    pending = list(nodes)
    while pending:
        for node in list(pending):
            if running_pid(cluster, node) is None:
                raise NodeFailed(node, f"node {node} exited during start-up")
            if node_ready(cluster, node, expect):
                pending.remove(node)
        if pending and time.monotonic() > deadline:
            raise NodeFailed(pending[0], f"node {pending[0]} not ready after {timeout:g}s")
        if pending:
            time.sleep(0.2)


def start_and_wait(cluster: Cluster, nodes: list[int], expect: set[int], timeout: float) -> None:
    """Start the nodes that are not running; on failure stop the ones started here."""
    started = []
    try:
        for node in nodes:
            if running_pid(cluster, node) is None:
                launch(cluster, node)
                started.append(node)
        wait_ready(cluster, nodes, expect, timeout)
    except NodeFailed as exc:
        print(f"{exc}; log {cluster.log_path(exc.node)}, last lines:", file=sys.stderr)
        print(log_tail(cluster, exc.node), file=sys.stderr)
        stop_nodes(cluster, started, timeout=15)
        raise KafkaScriptError(f"start-up failed (see {cluster.log_path(exc.node)})") from None
    except BaseException:
        stop_nodes(cluster, started, timeout=15)
        raise


def prepare(args: argparse.Namespace) -> Cluster:
    """The cluster in DIR: the saved one (checked against the options) or a new one."""
    directory = Path(args.dir).resolve()
    controller_port = args.controller_port or args.port + CONTROLLER_PORT_OFFSET
    wanted = dict(
        nodes=args.nodes,
        port=args.port,
        transaction_version=args.transaction_version,
        controller_port_base=controller_port,
        host=args.host,
        secure=args.secure,
        users=tuple(args.user),
    )
    if args.user and not args.secure:
        raise KafkaScriptError("--user needs --secure (a plaintext cluster has no users)")
    existing = load_cluster(directory)
    if existing is not None:
        have = {key: getattr(existing, key) for key in wanted}
        if have != wanted:
            raise KafkaScriptError(
                f"{directory} holds a cluster formatted with {have}, not {wanted}: "
                f"run `down` and remove {directory}, or use another --dir"
            )
        return replace(existing, heap=args.heap)
    check_port_plan(args.nodes, args.port, controller_port)
    directory.mkdir(parents=True, exist_ok=True)
    cluster = Cluster(
        str(directory),
        args.nodes,
        args.port,
        random_cluster_id(),
        args.heap,
        args.transaction_version,
        controller_port,
        args.host,
        args.secure,
        tuple(args.user),
    )
    if cluster.secure:
        make_secrets(cluster)
    format_storage(cluster)
    save_cluster(cluster)
    return cluster


def check_port_plan(nodes: int, port: int, controller_port: int) -> None:
    brokers = set(range(port, port + nodes))
    controllers = set(range(controller_port, controller_port + nodes))
    every = brokers | controllers
    if brokers & controllers or min(every) < 1 or max(every) > 65535:
        raise KafkaScriptError(
            f"ports {sorted(brokers)} (brokers) and {sorted(controllers)} (controllers) "
            "must be distinct and within 1..65535"
        )


def cmd_up(args: argparse.Namespace) -> int:
    cluster = prepare(args)
    nodes = list(cluster.node_ids())
    if all(running_pid(cluster, n) for n in nodes) and all(
        node_ready(cluster, n, set(nodes)) for n in nodes
    ):
        print(f"Kafka from {cluster.dir} is already running", file=sys.stderr)
    else:
        started = time.monotonic()
        start_and_wait(cluster, nodes, set(nodes), args.timeout)
        elapsed = time.monotonic() - started
        print(
            f"Kafka {KAFKA_VERSION} ({cluster.nodes} node(s)) ready in {elapsed:.1f}s; "
            f"logs in {cluster.dir}/node-*/server.log",
            file=sys.stderr,
        )
    if cluster.secure:
        print((cluster.secure_dir() / "client.env").read_text(), end="")
    print(cluster.bootstrap())
    return 0


def cmd_start_node(args: argparse.Namespace) -> int:
    cluster = existing_cluster(args.dir)
    check_node(cluster, args.node)
    start_and_wait(cluster, [args.node], {args.node}, args.timeout)
    print(f"{cluster.host}:{cluster.broker_port(args.node)}")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    cluster = load_cluster(Path(args.dir).resolve())
    if cluster is None:
        print(f"no cluster in {args.dir}; nothing to stop", file=sys.stderr)
        return 0
    stop_nodes(cluster, list(cluster.node_ids()), args.timeout)
    still = [n for n in cluster.node_ids() if running_pid(cluster, n) is not None]
    if still:
        print(f"nodes {still} still running", file=sys.stderr)
        return 1
    print(f"Kafka from {cluster.dir} stopped", file=sys.stderr)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    cluster = load_cluster(Path(args.dir).resolve())
    if cluster is None:
        print(f"no cluster in {args.dir}")
        return EXIT_DOWN
    all_up = True
    for node in cluster.node_ids():
        pid = running_pid(cluster, node)
        answering = pid is not None and api_versions_ok(cluster.broker_port(node), cluster.host,
                                                         Wire(cluster))
        all_up = all_up and answering
        print(
            f"node {node}: pid {pid or '-'} {'alive' if pid else 'dead'} "
            f"{'answering' if answering else 'not answering'} "
            f"{cluster.host}:{cluster.broker_port(node)} log {cluster.log_path(node)}"
        )
    print(cluster.bootstrap())
    return 0 if all_up else EXIT_DOWN


def cmd_kill(args: argparse.Namespace) -> int:
    cluster = existing_cluster(args.dir)
    check_node(cluster, args.node)
    pid = running_pid(cluster, args.node)
    if pid is None:
        print(f"node {args.node} is not running", file=sys.stderr)
        return 0
    sig = args.signal
    signal_group(pid, sig)
    if sig in (signal.SIGKILL, signal.SIGTERM):
        if not wait_gone(cluster, args.node, pid, time.monotonic() + args.timeout):
            raise KafkaScriptError(f"node {args.node} (pid {pid}) still alive after {sig.name}")
        cluster.pid_path(args.node).unlink(missing_ok=True)
    print(f"sent {sig.name} to node {args.node} (pid {pid})", file=sys.stderr)
    return 0


def cmd_features(args: argparse.Namespace) -> int:
    cluster = existing_cluster(args.dir)
    node = next((n for n in cluster.node_ids() if running_pid(cluster, n)), None)
    if node is None:
        raise KafkaScriptError(f"no node of {cluster.dir} is running")
    features = finalized_features(cluster.broker_port(node), cluster.host, Wire(cluster))
    for name, level in sorted(features.items()):
        print(f"{name}={level}")
    return 0


def existing_cluster(directory: str) -> Cluster:
    cluster = load_cluster(Path(directory).resolve())
    if cluster is None:
        raise KafkaScriptError(f"no cluster in {directory} (run `up` first)")
    return cluster


def check_node(cluster: Cluster, node: int) -> None:
    if node not in cluster.node_ids():
        raise KafkaScriptError(f"node {node} is not in 1..{cluster.nodes}")


# --------------------------------------------------------------------------- CLI


def signal_name(text: str) -> signal.Signals:
    try:
        return signal.Signals["SIG" + text.upper().removeprefix("SIG")]
    except KeyError:
        raise argparse.ArgumentTypeError(f"unknown signal {text!r}") from None


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = top.add_subparsers(dest="command", required=True)

    def command(name: str, func: object, timeout: float | None = None) -> argparse.ArgumentParser:
        p = sub.add_parser(name)
        p.add_argument("--dir", required=True, help="cluster directory")
        if timeout is not None:
            p.add_argument("--timeout", type=float, default=timeout, help="seconds")
        p.set_defaults(func=func)
        return p

    up = command("up", cmd_up, timeout=90)
    up.add_argument("--port", type=int, default=9092)
    up.add_argument("--nodes", type=int, choices=(1, 3), default=1)
    up.add_argument(
        "--controller-port",
        type=int,
        default=None,
        help=f"first controller port (default: port+{CONTROLLER_PORT_OFFSET})",
    )
    up.add_argument(
        "--host",
        default="127.0.0.1",
        help="address the brokers listen on and advertise (default: 127.0.0.1)",
    )
    up.add_argument("--transaction-version", type=int, default=None)
    up.add_argument("--heap", default="512m")
    up.add_argument("--secure", action="store_true",
                    help="SASL_SSL (SCRAM-SHA-512), TLS from keytool, StandardAuthorizer")
    up.add_argument("--user", action="append", default=[], metavar="NAME",
                    help="one more SCRAM user (repeatable; with --secure)")
    command("down", cmd_down, timeout=30)
    command("status", cmd_status)
    command("features", cmd_features)
    kill = command("kill", cmd_kill, timeout=30)
    kill.add_argument("--node", type=int, required=True)
    kill.add_argument(
        "--signal", type=signal_name, default="KILL", help="KILL (default), TERM, STOP, CONT, ..."
    )
    start = command("start-node", cmd_start_node, timeout=90)
    start.add_argument("--node", type=int, required=True)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.func(args))
    except KafkaScriptError as exc:
        print(f"kafka.py {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

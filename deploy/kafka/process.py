"""The JVMs: the java command from the Maven jars, a node's launch, pid, stop and log.

One JVM per node, each in its own process group (a terminal's Ctrl-C does not
reach it; `down` stops it). DIR/node-N/pid holds its pid and DIR/node-N/server.log
its stdout and stderr, appended across restarts.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from deploy.kafka.cluster import Cluster
from deploy.kafka.errors import KafkaScriptError

KAFKA_VERSION = "4.4.0"
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
JARS = ROOT / ".cache" / "kafka" / KAFKA_VERSION / "jars"
LOG4J2 = HERE / "log4j2.properties"
TAIL_LINES = 30


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

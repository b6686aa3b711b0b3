"""The commands of kafka.py (its docstring says what each does)."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path

from deploy.kafka.cluster import (
    CONTROLLER_PORT_OFFSET,
    Cluster,
    check_port_plan,
    load_cluster,
    save_cluster,
)
from deploy.kafka.errors import KafkaScriptError, NodeFailed
from deploy.kafka.probe import answering, finalized_features, node_ready, quiet_client_logs
from deploy.kafka.process import (
    KAFKA_VERSION,
    launch,
    log_tail,
    running_pid,
    signal_group,
    stop_nodes,
    wait_gone,
)
from deploy.kafka.security import make_secrets
from deploy.kafka.storage import format_storage, random_cluster_id

DESCRIPTION = "Local Apache Kafka brokers (KRaft, combined broker+controller) from Maven jars."
EXIT_DOWN = 3


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
        answers = pid is not None and answering(cluster, node)
        all_up = all_up and answers
        print(
            f"node {node}: pid {pid or '-'} {'alive' if pid else 'dead'} "
            f"{'answering' if answers else 'not answering'} "
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
    features = finalized_features(cluster, node)
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



def signal_name(text: str) -> signal.Signals:
    try:
        return signal.Signals["SIG" + text.upper().removeprefix("SIG")]
    except KeyError:
        raise argparse.ArgumentTypeError(f"unknown signal {text!r}") from None


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(description=DESCRIPTION)
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
    quiet_client_logs()
    try:
        return int(args.func(args))
    except KafkaScriptError as exc:
        print(f"kafka.py {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


"""What `up` writes once: each node's server.properties and its formatted storage."""

from __future__ import annotations

import re
import shutil
import subprocess

from deploy.kafka.cluster import Cluster
from deploy.kafka.errors import KafkaScriptError
from deploy.kafka.process import TAIL_LINES, java_command
from deploy.kafka.security import scram_arguments, secure_properties


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


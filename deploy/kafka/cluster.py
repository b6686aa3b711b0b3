"""What `up` formats in DIR: the node and port layout, saved as DIR/cluster.json.

Node N (1-based) serves clients on port+N-1 and its controller on
controller-port+N-1 (controller-port defaults to port+100).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from deploy.kafka.errors import KafkaScriptError

CONTROLLER_PORT_OFFSET = 100


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


def check_port_plan(nodes: int, port: int, controller_port: int) -> None:
    brokers = set(range(port, port + nodes))
    controllers = set(range(controller_port, controller_port + nodes))
    every = brokers | controllers
    if brokers & controllers or min(every) < 1 or max(every) > 65535:
        raise KafkaScriptError(
            f"ports {sorted(brokers)} (brokers) and {sorted(controllers)} (controllers) "
            "must be distinct and within 1..65535"
        )

"""The limits that can stop a scale run before the library does.

Each role a worker holds costs one socket per broker its transactional
producer talks to (the state partition's leader and the role's transaction
coordinator): one on the bench's one broker, so N roles need about N
descriptors in the worker and as many connections on the broker.
`raise_file_limit` raises this process's RLIMIT_NOFILE, soft and hard, when
it may (root, or CAP_SYS_RESOURCE): the broker the bench starts and every
worker it starts inherit it. `system_limits` records the others a run can
meet: the kernel's caps, the ephemeral port range (every connection to the
one broker address takes a local port) and the broker's connection settings.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path
from typing import Any

FDS_PER_ROLE = 4
"""Descriptors allowed per role when raising: room for two connections on each side."""
SPARE_FDS = 1_000

# Kafka 4.4's defaults for the settings that bound connections
# (org.apache.kafka.network.SocketServerConfigs); deploy/kafka/kafka.py sets none of them.
BROKER_DEFAULTS = {"max.connections": 2_147_483_647, "max.connections.per.ip": 2_147_483_647,
                   "max.connection.creation.rate": 2_147_483_647,
                   "socket.listen.backlog.size": 50, "connections.max.idle.ms": 600_000}


def _read_int(path: str) -> int | None:
    try:
        return int(Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def wanted_file_limit(roles: int) -> int:
    """The open-file limit for `roles` held roles, capped at what the kernel allows."""
    nr_open = _read_int("/proc/sys/fs/nr_open") or 1_048_576
    return min(FDS_PER_ROLE * roles + SPARE_FDS, nr_open)


def raise_file_limit(roles: int) -> dict[str, Any]:
    """Raise this process's RLIMIT_NOFILE (soft and hard) to fit `roles`, as root.

    Never lowers it. Not root: left as it is, and the record says so (each
    worker still raises its soft limit to the hard one, and a run that needs
    more stops where the limit stops it).
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    record: dict[str, Any] = {"before": [soft, hard], "wanted": wanted_file_limit(roles)}
    target = max(record["wanted"], hard) if hard != resource.RLIM_INFINITY else None
    if target is None or (soft >= record["wanted"] and hard >= record["wanted"]):
        record["raised"] = False
        record["why"] = "already enough"
    elif os.geteuid() != 0:
        record["raised"] = False
        record["why"] = "not root: the hard limit stays"
    else:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, target))
            record["raised"] = True
        except (ValueError, OSError) as exc:
            record["raised"] = False
            # Root without CAP_SYS_RESOURCE (a container) may not raise a hard limit.
            record["why"] = f"setrlimit refused (no CAP_SYS_RESOURCE?): {exc}"
    record["after"] = list(resource.getrlimit(resource.RLIMIT_NOFILE))
    return record


SOCKETS_PER_ROLE = 1
"""A held role's sockets in the worker on the bench's one broker (measured: 1.0)."""


def roles_allowed(nofile: int, baseline_fds: float = 250) -> int:
    """How many roles one worker can hold under an open-file limit of `nofile`."""
    return max(0, int((nofile - baseline_fds) // SOCKETS_PER_ROLE))


def system_limits() -> dict[str, Any]:
    """The kernel's and the broker's limits a scale run can meet, as found now."""
    ports = Path("/proc/sys/net/ipv4/ip_local_port_range")
    try:
        low, high = (int(x) for x in ports.read_text().split())
        port_range: list[int] | None = [low, high]
    except (OSError, ValueError):
        port_range = None
    return {
        "ephemeral_ports": port_range,
        "ephemeral_port_count": None if port_range is None else port_range[1] - port_range[0] + 1,
        "tcp_tw_reuse": _read_int("/proc/sys/net/ipv4/tcp_tw_reuse"),
        "somaxconn": _read_int("/proc/sys/net/core/somaxconn"),
        "tcp_max_syn_backlog": _read_int("/proc/sys/net/ipv4/tcp_max_syn_backlog"),
        "nr_open": _read_int("/proc/sys/fs/nr_open"),
        "file_max": _read_int("/proc/sys/fs/file-max"),
        "broker_settings": BROKER_DEFAULTS,
    }


def process_file_limit(pid: int) -> list[int] | None:
    """The RLIMIT_NOFILE (soft, hard) of process `pid`, from /proc."""
    try:
        for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
            if line.startswith("Max open files"):
                soft, hard = line.split()[3:5]
                return [int(soft), int(hard)]
    except (OSError, ValueError):
        return None
    return None

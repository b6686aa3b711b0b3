"""Ports for the servers a test starts, chosen where no client connection can take them.

A port the kernel gives ``bind((host, 0))`` comes from its ephemeral range, the
range it also draws the local port of every outgoing connection from. Between
a test closing its probe socket and its server binding the number, any
connection (a Kafka client's, a browser's) can take it, and the server then
fails with "address already in use". Below that range (32768-60999 on Linux)
only another listener can hold a port. A port is handed out once per process,
so two servers a test starts together never get the same number, and
``TESTS_PORTS=LOW-HIGH`` narrows the range, so two pytest processes side by
side (tests/split_run.py) never hand out the same one.
"""

from __future__ import annotations

import os
import random
import socket
from collections.abc import Iterable

__all__ = ["KAFKA_CONTROLLER_OFFSET", "LOOPBACK", "free_port", "kafka_port"]

LOOPBACK = "127.0.0.1"
# deploy/kafka/kafka.py: node N's controller listens at --port + 100 + N - 1 unless told.
KAFKA_CONTROLLER_OFFSET = 100
# The ports handed out: above the well-known and registered services most machines run.
_FROM, _TO = (int(bound) for bound in os.environ.get("TESTS_PORTS", "20000-32000").split("-"))
_choice = random.SystemRandom()  # leaves the global generator's seeded sequences alone
_handed_out: set[int] = set()


def free_port(host: str = LOOPBACK, *, also: Iterable[int] = ()) -> int:
    """A port P that is free on `host` now, with P + d free too for each d in `also`.

    ``also=(KAFKA_CONTROLLER_OFFSET,)`` for a one-node broker that picks its
    controller port itself; ``also=(1, 2)`` for three servers on consecutive ports.
    """
    offsets = (0, *also)
    for _ in range(500):
        port = _choice.randrange(_FROM, _TO - max(offsets))
        ports = {port + offset for offset in offsets}
        if not ports & _handed_out and all(_bindable(host, p) for p in ports):
            _handed_out.update(ports)
            return port
    raise RuntimeError(f"no free port on {host} between {_FROM} and {_TO} "
                       f"(with offsets {offsets})")


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as sock:
        # As a server binds: a closed connection's TIME_WAIT does not hold the port.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def kafka_port(nodes: int = 1) -> int:
    """The --port of a `nodes`-node local cluster: its brokers listen at P to
    P + nodes - 1 and its controllers at P + 100 onwards (deploy/kafka/kafka.py)."""
    return free_port(also=[*range(1, nodes),
                           *range(KAFKA_CONTROLLER_OFFSET, KAFKA_CONTROLLER_OFFSET + nodes)])

"""The ports the suite's servers get: free, outside the range the kernel draws the
local ports of outgoing connections from, and never handed out twice."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.support.ports import KAFKA_CONTROLLER_OFFSET, free_port, kafka_port


def ephemeral_range() -> tuple[int, int]:
    low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    return int(low), int(high)


def bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_a_port_and_its_companions_are_free_and_below_the_ephemeral_range():
    low, _ = ephemeral_range()
    port = free_port(also=(1, 2))
    assert all(port + offset < low and bindable(port + offset) for offset in (0, 1, 2))


def test_a_one_node_broker_port_leaves_its_controller_port_free():
    port = kafka_port()
    assert bindable(port)
    assert bindable(port + KAFKA_CONTROLLER_OFFSET)


def test_no_port_is_handed_out_twice_even_while_nothing_listens_on_it():
    ports = [free_port() for _ in range(200)]
    cluster = kafka_port(3)
    assert len(set(ports)) == len(ports)
    assert not {cluster, cluster + 1, cluster + 2, cluster + 100, cluster + 102} & set(ports)

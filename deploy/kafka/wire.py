"""Readiness probes: real Kafka requests to one node (plaintext, or TLS plus SCRAM)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import secrets
import socket
import ssl
import struct

from deploy.kafka.cluster import Cluster
from deploy.kafka.security import ADMIN, SCRAM, read_secret


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

"""Readiness probes: real Kafka requests to one node, through aiokafka's client.

A probe connects to exactly the node it asks about (its client listener,
``host:port+N-1``) as a client of the cluster would: plaintext, or on a secured
cluster with the admin's settings of DIR/secure/client.env (TLS trusting
``ca.pem``, SASL SCRAM-SHA-512), which `krabka.kafka.connection` turns
into aiokafka's options. aiokafka's connection asks ApiVersions v0 and, when
secured, logs in before the first request.

Each probe is one ``asyncio.run``, bounded by `PROBE_TIMEOUT`: a node that
cannot be reached, does not speak Kafka, refuses the login or does not answer
in time is "not ready" (None), never an exception.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError

from deploy.kafka.cluster import Cluster
from deploy.kafka.errors import KafkaScriptError
from deploy.kafka.security import ADMIN, client_settings
from krabka.errors import ConfigurationError
from krabka.kafka.connection import Connection
from krabka.kafka.protocol.messages import ApiVersionsRequest, BrokerApiVersions, parse_api_versions

REQUEST_TIMEOUT = 2.0  # seconds for the connection, and for each request (a login's too)
PROBE_TIMEOUT = 5.0  # seconds for one probe in all
CLOSE_TIMEOUT = 1.0  # a TLS close waits for the peer, which a stopped node never is
CLIENT_ID = "kafka.py"

T = TypeVar("T")


def quiet_client_logs() -> None:
    """Keep aiokafka's log lines off the commands' output: it logs each failed
    connection at ERROR, and to a probe polling a starting node that is an answer
    ("not ready"), not an error."""
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)


def connection(cluster: Cluster) -> Connection:
    """How the probes reach the cluster: as a plain client, or as the admin."""
    if not cluster.secure:
        return Connection(bootstrap_servers=cluster.bootstrap())
    try:
        return Connection.from_env(client_settings(cluster, ADMIN))
    except ConfigurationError as exc:
        raise KafkaScriptError(f"{cluster.secure_dir()}: {exc}") from None


def _ask(cluster: Cluster, node: int, question: Callable[[AIOKafkaClient], Awaitable[T]]
         ) -> T | None:
    """`question`'s answer from a client that bootstrapped from `node` alone (its
    Metadata, no topics), or None when the node did not answer in time."""
    options = connection(cluster).client_options()

    async def run() -> T:
        client = AIOKafkaClient(
            bootstrap_servers=f"{cluster.host}:{cluster.broker_port(node)}",
            client_id=CLIENT_ID,
            request_timeout_ms=int(REQUEST_TIMEOUT * 1000),
            **options,
        )
        try:
            async with asyncio.timeout(PROBE_TIMEOUT):
                await client.bootstrap()
                return await question(client)
        finally:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CLOSE_TIMEOUT):
                    await client.close()

    try:
        return asyncio.run(run())
    except (OSError, KafkaError, TimeoutError):
        return None


async def _brokers(client: AIOKafkaClient) -> set[int]:
    return {broker.nodeId for broker in client.cluster.brokers()}


def metadata_brokers(cluster: Cluster, node: int) -> set[int] | None:
    """Node ids of the brokers `node` reports (Metadata lists the unfenced ones),
    or None when it does not answer."""
    return _ask(cluster, node, _brokers)


def node_ready(cluster: Cluster, node: int, expect: set[int]) -> bool:
    """The node answers Metadata and lists every node in `expect` as a broker."""
    brokers = metadata_brokers(cluster, node)
    return brokers is not None and expect <= brokers


def answering(cluster: Cluster, node: int) -> bool:
    """The node answers a Kafka request (Metadata, after the login when secured)."""
    return metadata_brokers(cluster, node) is not None


def api_versions(cluster: Cluster, node: int) -> BrokerApiVersions | None:
    """The node's ApiVersions v3+ answer (finalized features included), or None.

    Asked of the node itself, so it must be in the Metadata it reports (unfenced).
    """

    async def ask(client: AIOKafkaClient) -> BrokerApiVersions:
        return parse_api_versions(await client.send(node, ApiVersionsRequest()))

    return _ask(cluster, node, ask)


def finalized_features(cluster: Cluster, node: int) -> dict[str, int]:
    """The cluster's finalized feature levels (max) as `node` reports them."""
    versions = api_versions(cluster, node)
    if versions is None or versions.error_code != 0:
        raise KafkaScriptError(
            f"node {node} ({cluster.host}:{cluster.broker_port(node)}) did not answer "
            f"ApiVersions within {PROBE_TIMEOUT:g}s"
            + ("" if versions is None else f" (error {versions.error_code})"))
    return {name: versions.finalized_level(name) for name in versions.finalized_features}

"""A role producer talks to each broker over one connection, not two.

aiokafka keys its connections by broker and by group: a transactional
producer opens one connection to a broker for Produce and another to the
same broker, as transaction coordinator, for FindCoordinator's followers
(InitProducerId, AddPartitionsToTxn, EndTxn). The second group exists for
consumers, whose heartbeats must not queue behind a Fetch that waits up to
``fetch_max_wait_ms``; a producer has no such request, and Kafka's own Java
producer uses one connection per broker. Two per held role meant two file
descriptors per role in the worker and two on the broker: a worker of
10 000 roles needed 20 000 descriptors on each side, this machine's hard
limit, and the broker ran out first (docs/benchmarks.md). aiokafka has no
setting for it, so `one_connection_per_broker` sends the coordination group's
requests over the default group's connection: it replaces the client's
``ready`` and ``send`` on the instance (the two calls that take a group,
and the ones the producer's sender makes).
"""

from __future__ import annotations

from typing import Any

from krabka.kafka.aiokafka_internals import default_connection_group

__all__ = ["one_connection_per_broker"]


def one_connection_per_broker(client: Any) -> None:
    """Make `client` (an ``AIOKafkaClient`` not yet started) use one connection per broker."""
    ready, send = client.ready, client.send
    default = default_connection_group()

    async def ready_default(node_id: Any, *, group: Any = default) -> Any:
        return await ready(node_id, group=default)

    async def send_default(node_id: Any, request: Any, *, group: Any = default) -> Any:
        return await send(node_id, request, group=default)

    client.ready = ready_default
    client.send = send_default

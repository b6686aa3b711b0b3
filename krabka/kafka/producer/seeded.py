"""A role producer's network client started from what its transport already knows.

Left to itself, a new role producer's client opens a connection to a
bootstrap broker (with an ApiVersions request of its own), asks it for the
cluster's brokers and closes it; then it asks for the state topic's
metadata, and its sender asks for the role's transaction coordinator. A
worker taking thousands of roles paid for that at every role: about three
connections, three Metadata and two FindCoordinator requests per role, and
decoding ApiVersions answers alone took a tenth of its time
(docs/benchmarks.md at c3170c6, "a role producer started from its transport's
client").

The transport's raw client (`krabka.kafka.producer.coordinators`) already
knows the brokers, asks one Metadata request for the state topic now and
then on behalf of every role, and looks each role's coordinator up anyway:
a tenure's resignation asks it. `start_seeded` hands that to the new client,
as ``bootstrap()`` and the sender's first lookup would have: the cluster
metadata of that one response, the topics the client tracks (so its own
refreshes keep the state topic), the metadata synchronizer task that
``bootstrap()`` starts, and the sender's transaction coordinator. The
producer then opens only the connections it talks over.

It is routing only. A leader or coordinator that has moved since is
answered with NOT_LEADER_OR_FOLLOWER or NOT_COORDINATOR, on which aiokafka
refreshes the client's metadata and looks the coordinator up again, as it
does when its own view goes stale. No epoch, sequence number or record
depends on it, so nothing the broker fences does. aiokafka has no public way
to seed a client: `krabka.kafka.aiokafka_internals.seed_client` does it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from krabka.kafka.aiokafka_internals import seed_client
from krabka.kafka.single_flight import SingleFlight

__all__ = ["METADATA_MAX_AGE", "Seed", "SharedMetadata", "start_seeded"]

METADATA_MAX_AGE = 5.0
"""Seconds a Metadata response seeds new clients before it is asked again.

Short, because a client seeded from an old answer pays a refused request
and a refresh when a leader has moved; long enough that thousands of roles
taken in a burst share a handful of requests."""


@dataclass(frozen=True)
class Seed:
    """What a new role producer's client starts from."""

    metadata: Any
    """A Metadata response naming the brokers and the state topic's partitions."""
    topics: frozenset[str]
    """The topics the client tracks from the start."""
    coordinator: int
    """The broker that is the role's transaction coordinator."""


def start_seeded(producer: Any, seed: Seed) -> None:
    """Start `producer`'s client from `seed` instead of ``bootstrap()``.

    The producer must be built and not started; afterwards its client is in
    the state a bootstrap and a first metadata refresh leave it in, and its
    sender's coordinator lookup is answered.
    """
    seed_client(producer, seed.metadata, seed.topics, seed.coordinator)


class SharedMetadata:
    """One Metadata response for a topic, asked at most every `max_age` seconds
    and shared by every caller in the meantime (callers while it is asked
    share the request: `SingleFlight`)."""

    def __init__(self, ask: Callable[[Iterable[str]], Awaitable[Any]], *,
                 max_age: float = METADATA_MAX_AGE,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._ask = ask
        self._max_age = max_age
        self._monotonic = monotonic
        self._answers: dict[str, tuple[float, Any]] = {}
        self._asking: SingleFlight[str, Any] = SingleFlight()

    async def get(self, topic: str) -> Any:
        """A Metadata response for `topic` at most `max_age` seconds old."""
        held = self._answers.get(topic)
        if held is not None and self._monotonic() - held[0] < self._max_age:
            return held[1]
        return await self._asking.do(topic, lambda: self._fetch(topic))

    async def close(self) -> None:
        """Cancel the request in flight, if any; its callers get `CancelledError`."""
        await self._asking.close()

    async def _fetch(self, topic: str) -> Any:
        asked_at = self._monotonic()
        answer = await self._ask([topic])
        self._answers[topic] = (asked_at, answer)
        return answer

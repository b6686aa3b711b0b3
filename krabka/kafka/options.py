"""The aiokafka options a `KafkaTransport` passes to each client it creates.

The transport creates five kinds of aiokafka object (transactional and plain
producers, consumers, an admin client, a raw client). Connection settings the
user gives (``security_protocol``, ``ssl_context``, ``sasl_*``, ``client_id``,
``request_timeout_ms``, ...) must reach every one of them, or one client would
connect in plaintext while the others use TLS. Each class gets exactly the
options its constructor accepts; an option no class accepts is a `TypeError`
at construction, and an option the protocol depends on is refused.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from typing import Any

from aiokafka import (  # type: ignore[import-untyped, unused-ignore]
    AIOKafkaClient,
    AIOKafkaConsumer,
    AIOKafkaProducer,
)
from aiokafka.admin import AIOKafkaAdminClient  # type: ignore[import-untyped, unused-ignore]

__all__ = ["RESERVED", "ClientOptions"]

RESERVED = frozenset({
    # docs/design.md#the-kafka-adapter: the epoch binds a producer with transactional.id = role,
    # acks=all and idempotence; reads are read_committed without a group.
    "transactional_id", "transaction_timeout_ms", "enable_idempotence", "acks",
    "isolation_level", "group_id", "group_instance_id", "enable_auto_commit",
    "auto_offset_reset", "partitioner", "fetch_max_wait_ms",
    # The state topic carries raw bytes.
    "key_serializer", "value_serializer", "key_deserializer", "value_deserializer",
    "bootstrap_servers", "loop",
})

_CLASSES: tuple[Any, ...] = (
    AIOKafkaProducer, AIOKafkaConsumer, AIOKafkaAdminClient, AIOKafkaClient
)


@functools.cache
def _accepted(cls: Any) -> frozenset[str]:
    # Cached: a worker taking thousands of roles builds a producer for each,
    # and reading a signature costs more than the rest of building its options.
    return frozenset(inspect.signature(cls.__init__).parameters) - {"self"}


class ClientOptions:
    """Validated user options, split per aiokafka class."""

    def __init__(self, bootstrap_servers: str | list[str], options: Mapping[str, Any]) -> None:
        reserved = sorted(RESERVED.intersection(options))
        if reserved:
            raise ValueError(
                f"KafkaTransport sets {', '.join(reserved)} itself "
                "(see docs/design.md#the-kafka-adapter); remove them from the options"
            )
        known = frozenset().union(*(_accepted(cls) for cls in _CLASSES))
        unknown = sorted(set(options) - known)
        if unknown:
            raise TypeError(f"unknown aiokafka option(s): {', '.join(unknown)}")
        self.bootstrap_servers = bootstrap_servers
        self._options = dict(options)

    def for_class(
        self, cls: Any, defaults: Mapping[str, Any] | None = None, **fixed: Any
    ) -> dict[str, Any]:
        """Keyword arguments for `cls`: `defaults`, the user's options it accepts, `fixed`."""
        accepted = _accepted(cls)
        kwargs = dict(defaults or {})
        kwargs.update((k, v) for k, v in self._options.items() if k in accepted)
        kwargs.update(fixed)
        kwargs["bootstrap_servers"] = self.bootstrap_servers
        return kwargs

    def producer(self, defaults: Mapping[str, Any] | None = None, **fixed: Any) -> dict[str, Any]:
        return self.for_class(AIOKafkaProducer, defaults, **fixed)

    def consumer(self, defaults: Mapping[str, Any] | None = None, **fixed: Any) -> dict[str, Any]:
        return self.for_class(AIOKafkaConsumer, defaults, **fixed)

    def admin(self) -> dict[str, Any]:
        return self.for_class(AIOKafkaAdminClient)

    def client(self) -> dict[str, Any]:
        return self.for_class(AIOKafkaClient)

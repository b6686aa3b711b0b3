"""The Kafka adapter: `KafkaTransport` implements the six transport protocols.

Imports aiokafka (and registers broker codes 90 and 105 with it, see
`coordination.kafka.protocol`); the core library does not need it. Importing
it refuses an aiokafka version outside the tested range, unless
``COORDINATION_ALLOW_UNTESTED_AIOKAFKA=1`` (see `coordination.kafka.aiokafka_internals`).
"""

import aiokafka  # type: ignore[import-untyped, unused-ignore]

from coordination.kafka.aiokafka_internals import AIOKAFKA

# Before any module of the adapter touches aiokafka's internals.
AIOKAFKA.require(aiokafka.__version__)

from coordination.defaults import STATE_TOPIC  # noqa: E402
from coordination.kafka.access import AccessDeniedError, Acl, check_access, member_acls  # noqa: E402
from coordination.kafka.connection import Connection  # noqa: E402
from coordination.kafka.errors import (  # noqa: E402
    KafkaTransportError,
    KafkaUnavailableError,
    ProducerFatalError,
)
from coordination.kafka.transport import KafkaTransport  # noqa: E402

__all__ = [
    "STATE_TOPIC",
    "AccessDeniedError",
    "Acl",
    "Connection",
    "KafkaTransport",
    "KafkaTransportError",
    "KafkaUnavailableError",
    "ProducerFatalError",
    "check_access",
    "member_acls",
]

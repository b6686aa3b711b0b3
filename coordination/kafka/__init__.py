"""The Kafka adapter: `KafkaTransport` implements the four transport protocols.

Imports aiokafka (and registers broker codes 90 and 105 with it, see
`coordination.kafka.protocol`); the core library does not need it.
"""

from coordination.defaults import STATE_TOPIC
from coordination.kafka.errors import (
    KafkaTransportError,
    KafkaUnavailableError,
    ProducerFatalError,
)
from coordination.kafka.transport import KafkaTransport

__all__ = [
    "STATE_TOPIC",
    "KafkaTransport",
    "KafkaTransportError",
    "KafkaUnavailableError",
    "ProducerFatalError",
]

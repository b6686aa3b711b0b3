"""The Kafka adapter: `KafkaTransport` implements the six transport protocols.

Readers of a term-mode leader's outputs keep a `TermFilter`'s marks with
their committed offsets through `commit_marks` and `resume`
(`krabka.kafka.consumer.term_offsets`).

Imports aiokafka; the core library does not need it. A `KafkaTransport`
registers broker codes 90 and 105 with aiokafka when it is created; a
process whose own aiokafka clients may meet them first (the worker's Faust
producers) calls `register_error_codes` itself, once, before they start.
Importing the adapter refuses an aiokafka version outside the tested range,
unless ``COORDINATION_ALLOW_UNTESTED_AIOKAFKA=1`` (see
`krabka.kafka.aiokafka_internals`, which checks it before it imports
aiokafka's private modules).
"""

# First: the version check, before any module of the adapter imports aiokafka's internals.
import krabka.kafka.aiokafka_internals  # noqa: F401
from krabka.defaults import STATE_TOPIC
from krabka.kafka.access import AccessDeniedError, Acl, check_access, member_acls
from krabka.kafka.connection import Connection
from krabka.kafka.consumer.term_offsets import (
    OFFSET_METADATA_MAX_BYTES,
    Resumed,
    commit_marks,
    marks_metadata,
    resume,
)
from krabka.kafka.errors import (
    KafkaTransportError,
    KafkaUnavailableError,
    MarksTooLargeError,
    ProducerFatalError,
)
from krabka.kafka.protocol.messages import register_error_codes
from krabka.kafka.topics import TopicOutcome, ensure_topics
from krabka.kafka.transport import KafkaTransport

__all__ = [
    "OFFSET_METADATA_MAX_BYTES",
    "STATE_TOPIC",
    "AccessDeniedError",
    "Acl",
    "Connection",
    "KafkaTransport",
    "KafkaTransportError",
    "KafkaUnavailableError",
    "MarksTooLargeError",
    "ProducerFatalError",
    "Resumed",
    "TopicOutcome",
    "check_access",
    "commit_marks",
    "ensure_topics",
    "marks_metadata",
    "member_acls",
    "register_error_codes",
    "resume",
]

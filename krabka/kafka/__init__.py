"""The Kafka adapter: `KafkaTransport` implements the six transport protocols.

Readers of a term-mode leader's outputs keep a `TermFilter`'s marks with
their committed offsets through `commit_marks` and `resume`
(`krabka.kafka.consumer.term_offsets`).

Imports aiokafka (and registers broker codes 90 and 105 with it, see
`krabka.kafka.protocol.messages`); the core library does not need it. Importing
it refuses an aiokafka version outside the tested range, unless
``COORDINATION_ALLOW_UNTESTED_AIOKAFKA=1`` (see `krabka.kafka.aiokafka_internals`).
"""

import aiokafka  # type: ignore[import-untyped, unused-ignore]

from krabka.kafka.aiokafka_internals import AIOKAFKA

# Before any module of the adapter touches aiokafka's internals.
AIOKAFKA.require(aiokafka.__version__)

from krabka.defaults import STATE_TOPIC  # noqa: E402
from krabka.kafka.access import AccessDeniedError, Acl, check_access, member_acls  # noqa: E402
from krabka.kafka.connection import Connection  # noqa: E402
from krabka.kafka.consumer.term_offsets import (  # noqa: E402
    OFFSET_METADATA_MAX_BYTES,
    Resumed,
    commit_marks,
    marks_metadata,
    resume,
)
from krabka.kafka.errors import (  # noqa: E402
    KafkaTransportError,
    KafkaUnavailableError,
    MarksTooLargeError,
    ProducerFatalError,
)
from krabka.kafka.topics import TopicOutcome, ensure_topics  # noqa: E402
from krabka.kafka.transport import KafkaTransport  # noqa: E402

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
    "resume",
]

"""The errors the library raises on purpose: one tree under `CoordinationError`.

`TransportError` is the only retryable one: a transport raises it for a
failure of the network or the cluster that may pass (an unreachable broker,
a request that timed out), and the core retries it until the fence deadline.
The other errors are outcomes (`FencedError`, `EpochLostError`,
`OutcomeUnknownError`), configuration the protocol cannot run on
(`StateTopicError`, and in term mode `CompactedOutputError`), settings
that cannot work together (`ConfigurationError`), bad bytes (`FormatError`),
a call the lifecycle does not allow (`InvalidStateError`) or a principal
without an ACL it needs (`krabka.kafka.AccessDeniedError`). Anything a
transport raises that is not a
`CoordinationError` (a `TypeError`, an `AttributeError`) is a bug and is
never retried: a tenure that meets one ends at once with it in `err`.
A bad argument noticed before any I/O is a `ValueError`.
"""

from __future__ import annotations

__all__ = [
    "CompactedOutputError",
    "ConfigurationError",
    "CoordinationError",
    "EpochLostError",
    "FencedError",
    "FormatError",
    "InvalidStateError",
    "OutcomeUnknownError",
    "StateTopicError",
    "TransportError",
    "UndeclaredTopicError",
    "UntestedVersionError",
    "retryable",
]

RECORD_PARTS = (
    # The frozen state-topic format (krabka.format.records).
    "key",
    "registration value",
    "lease value",
    # The term format (krabka.format.terms) and the filter's saved marks.
    "term key",
    "claim value",
    "heartbeat value",
    "barrier value",
    "term header",
    "term marks",
)


class CoordinationError(Exception):
    """The root of every error this library raises on purpose."""


class TransportError(CoordinationError):
    """A transport could not complete a call for a reason that may pass.

    The network, a broker or the transaction coordinator failed or did not
    answer in time; the role's epoch is not known to have moved on. The core
    retries it until the fence deadline, and `LeaderRunner` campaigns again
    after it. A transport error that also means the epoch is lost is an
    `EpochLostError` as well, and that wins: the tenure ends.
    """


def retryable(exc: BaseException) -> bool:
    """Whether a tenure may retry the call that raised `exc`.

    Only a `TransportError` that does not also mean the epoch is lost is;
    every other error ends the tenure at once with it in `err`.
    """
    return isinstance(exc, TransportError) and not isinstance(exc, EpochLostError)


class FormatError(CoordinationError, ValueError):
    """Bytes that do not decode under this library's record formats.

    `part` names the record part that failed, so a reader can report the
    record and skip it: for the state topic exactly one of ``"key"``,
    ``"registration value"`` or ``"lease value"``; for the term format one of
    ``"term key"``, ``"claim value"``, ``"heartbeat value"``,
    ``"barrier value"``, ``"term header"`` or ``"term marks"`` (a
    `TermFilter`'s saved state).
    """

    def __init__(self, part: str, reason: str) -> None:
        if part not in RECORD_PARTS:
            raise ValueError(f"unknown record part {part!r}")
        super().__init__(f"malformed {part}: {reason}")
        self.part = part
        self.reason = reason


class FencedError(CoordinationError):
    """The cluster rejected a write because a newer epoch holds the role.

    Every fence signal, whatever the broker's error code, surfaces as this.
    """


class ConfigurationError(CoordinationError, ValueError):
    """Settings that cannot work together, found before any connection.

    The message names the environment variable (or flag) at fault, such as
    a SASL protocol without a mechanism or a TLS file that does not exist.
    """


class StateTopicError(CoordinationError):
    """The state topic or the broker is configured so the protocol cannot run.

    The message names what is wrong and how to fix it; start-up stops rather
    than risk two partition counts splitting a role.
    """


class EpochLostError(CoordinationError):
    """The transport can no longer write under the tenure's epoch.

    Its producer failed fatally or was closed (a call outlived the
    transaction timeout), although the epoch may still be current: the
    tenure ends at once with this error. Acquire again to lead again.
    """


class OutcomeUnknownError(CoordinationError):
    """A guarded commit was still unanswered when the tenure ran out of time.

    The leader stopped waiting at its fence deadline plus the fence margin, so
    no caller is held past the end of its tenure. The commit was sent and may
    still succeed or fail: read the output with read_committed to learn which.
    This is not a `FencedError`, which means the broker refused the write.
    """


class InvalidStateError(CoordinationError, RuntimeError):
    """A call the object's lifecycle state does not allow, such as resigning a
    tenure from inside that tenure's own transaction (it would wait for itself).
    """


class UndeclaredTopicError(CoordinationError, ValueError):
    """A term-mode leader was asked to write to a topic it did not declare.

    Readers learn a new term from the barriers on the declared topics
    (`LeadershipOptions.outputs`) only, so a record elsewhere could never be
    fenced: it is refused before anything is written.
    """


class CompactedOutputError(CoordinationError):
    """A term-mode leader declared an output topic whose cleanup policy compacts.

    The cleaner keeps the latest record of each key whatever its term: a
    deposed leader's write after the new leader's write of the same key,
    which every `TermFilter` drops, is the one compaction keeps, and a zombie
    tombstone removes the key (docs/term-mode.md#compacted-output-topics).
    Refused before the member registers, unless the options say
    ``allow_compacted_outputs=True``. `topic` names the topic and
    `cleanup_policy` its setting.
    """

    def __init__(self, topic: str, cleanup_policy: str) -> None:
        super().__init__(
            f"the output topic {topic!r} has cleanup.policy={cleanup_policy!r}: compaction "
            "keeps the latest record of each key whatever its term, so a deposed leader's "
            "record (which every TermFilter drops) can replace the current leader's; use a "
            "topic with cleanup.policy=delete, or pass allow_compacted_outputs=True after "
            "reading docs/term-mode.md#compacted-output-topics")
        self.topic = topic
        self.cleanup_policy = cleanup_policy


class UntestedVersionError(CoordinationError, ImportError):
    """A dependency is installed in a version this project was not tested with.

    Raised when the module that relies on it is imported (`krabka.kafka`
    for aiokafka, the worker for faust-streaming), because both use internals of
    their dependency that a new release may change without notice. The message
    names the tested versions and the environment variable that turns the
    refusal into an `UntestedVersionWarning`
    (docs/decisions/0006-packaging-and-dependency-versions.md).
    """

"""The errors the protocol raises on purpose."""

from __future__ import annotations

__all__ = ["EpochLostError", "FencedError", "FormatError", "StateTopicError"]

RECORD_PARTS = ("key", "registration value", "lease value")


class FormatError(ValueError):
    """Bytes of the state topic that do not decode under the frozen format.

    `part` names the record part that failed, exactly one of ``"key"``,
    ``"registration value"`` or ``"lease value"``, so a reader can report the
    record and skip it.
    """

    def __init__(self, part: str, reason: str) -> None:
        if part not in RECORD_PARTS:
            raise ValueError(f"unknown record part {part!r}")
        super().__init__(f"malformed {part}: {reason}")
        self.part = part
        self.reason = reason


class FencedError(Exception):
    """The cluster rejected a write because a newer epoch holds the role.

    Every fence signal, whatever the broker's error code, surfaces as this.
    """


class StateTopicError(Exception):
    """The state topic or the broker is configured so the protocol cannot run.

    The message names what is wrong and how to fix it; start-up stops rather
    than risk two partition counts splitting a role.
    """


class EpochLostError(Exception):
    """The transport can no longer write under the tenure's epoch.

    Its producer failed fatally or was closed (a call outlived the
    transaction timeout), although the epoch may still be current: the
    tenure ends at once with this error (DESIGN.md §5.2). Acquire again to
    lead again.
    """

"""The errors of kafka.py's commands: each ends the command with one clear message."""

from __future__ import annotations


class KafkaScriptError(Exception):
    """A failure worth one clear message (and the log tail when there is one)."""


class NodeFailed(KafkaScriptError):
    """A node exited or stayed unready during start-up."""

    def __init__(self, node: int, message: str) -> None:
        super().__init__(message)
        self.node = node


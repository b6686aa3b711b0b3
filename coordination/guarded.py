"""Guarded transactions: the writes a tenure makes under its token.

`Leadership.transaction()` opens one; `GuardedWriter` sends into it.
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING

from coordination.transport import GuardedTransaction

if TYPE_CHECKING:
    from coordination.tenure import Leadership

__all__ = ["GuardedWriter"]

# The tenure whose transaction() body the current task runs in (resign from
# there would wait for its own transaction).
_IN_TRANSACTION: contextvars.ContextVar[Leadership | None] = contextvars.ContextVar(
    "coordination_in_transaction", default=None
)


class GuardedWriter:
    """Sends records inside a guarded transaction of a `Leadership`."""

    def __init__(self, leadership: Leadership, txn: GuardedTransaction) -> None:
        self._leadership = leadership
        self._txn = txn

    async def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
    ) -> None:
        """Add a record to the transaction; visible only if the commit succeeds."""
        await self._leadership._bounded(self._txn.send(topic, value, key, partition))


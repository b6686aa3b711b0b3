"""A `Transport` wrapper that times lease writes, for the renewal-latency metric.

`Leadership` renews in the background and reports nothing; every lease record
it writes goes through `write_lease` (alone, or inside a guarded transaction),
so timing that call measures renewals without a hook in the library.
Tombstones (resignations) are not timed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from coordination import FormatError, GuardedTransaction, Transport, decode_key

__all__ = ["TimedTransport"]

Observer = Callable[[str, float], None]


def _role(key: bytes) -> str:
    try:
        return decode_key(key).role
    except FormatError:
        return "?"


class _TimedTransaction:
    def __init__(self, txn: GuardedTransaction, observe: Observer) -> None:
        self._txn = txn
        self._observe = observe
        self._lease_role: str | None = None
        self._started = 0.0

    async def send(self, topic: str, value: bytes | None, key: bytes | None = None,
                   partition: int | None = None) -> None:
        await self._txn.send(topic, value, key, partition)

    async def write_lease(self, partition: int, key: bytes, value: bytes | None) -> int:
        # A renewal riding in a guarded transaction is durable only at commit.
        if value:
            self._lease_role, self._started = _role(key), time.perf_counter()
        return await self._txn.write_lease(partition, key, value)

    async def commit(self) -> None:
        await self._txn.commit()
        if self._lease_role is not None:
            self._observe(self._lease_role, time.perf_counter() - self._started)

    async def abort(self) -> None:
        await self._txn.abort()


class TimedTransport:
    """Delegates everything to `inner`; reports each committed lease write's duration."""

    def __init__(self, inner: Transport, observe: Observer) -> None:
        self._inner = inner
        self._observe = observe

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def write_lease(self, partition: int, key: bytes, value: bytes | None) -> int:
        started = time.perf_counter()
        offset = await self._inner.write_lease(partition, key, value)
        if value:
            self._observe(_role(key), time.perf_counter() - started)
        return offset

    async def begin_transaction(self, role: str) -> _TimedTransaction:
        return _TimedTransaction(await self._inner.begin_transaction(role), self._observe)

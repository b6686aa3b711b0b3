"""A client whose renewals hang until the test lets them through."""

from __future__ import annotations

import asyncio

from krabka.testing.memory import MemoryBroker, MemoryTransport


class HangingRenewals(MemoryTransport):
    """A client whose renewals hang from `block()` until `resume()`: epoch mode's
    lease transactions and term mode's heartbeats wait, as on a wedged connection.

    Block it only once its tenure has begun: a campaign's own writes wait too.
    """

    def __init__(self, broker: MemoryBroker) -> None:
        super().__init__(broker)
        self._flowing = asyncio.Event()
        self._flowing.set()

    def block(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    async def begin_transaction(self, role, token):
        await self._flowing.wait()
        return await super().begin_transaction(role, token)

    async def append_term(self, partition, key, value):
        await self._flowing.wait()
        return await super().append_term(partition, key, value)

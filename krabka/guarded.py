"""Guarded transactions: the writes a tenure makes under its token.

`Leadership.transaction()` opens one and yields a `RecordWriter`: in epoch
mode a `krabka.epoch.tenure.GuardedWriter`, which sends into the role's
Kafka transaction; in term mode a `krabka.term.tenure.TermWriter`.
`commit_lease` is the one composition of a lease record in a transaction of
its own (a renewal, a resignation's tombstone) from the transport's
primitives.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from krabka.format.token import FencingToken
from krabka.transport import LeaseWriter

__all__ = ["RecordWriter", "commit_lease"]

log = logging.getLogger("krabka.leadership")

class RecordWriter(Protocol):
    """What the body of `Leadership.transaction()` writes with, in either mode."""

    async def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
    ) -> None:
        """Add a record to the transaction; it is written only if the transaction commits."""
        ...


async def commit_lease(
    transport: LeaseWriter,
    role: str,
    token: FencingToken,
    partition: int,
    key: bytes,
    value: bytes | None,
) -> int:
    """Commit one lease record in its own transaction of `role`'s fenced
    producer, which must hold `token`; return the record's offset.

    A cancelled write abandons its transaction without waiting (the
    transport settles it before the producer's next transaction, or the
    coordinator aborts it at its timeout): a cancelled caller is not held by
    a broker that may be gone. Any other error aborts it (a no-op once it
    ended) and is raised; an abort that fails too is only logged.
    """
    txn = await transport.begin_transaction(role, token)
    try:
        offset = await txn.write_lease(partition, key, value)
        await txn.commit()
    except asyncio.CancelledError:
        txn.abandon()
        raise
    except BaseException:
        try:
            await txn.abort()
        except Exception as exc:
            log.debug("%s: aborting a failed lease write: %r", role, exc)
        raise
    return offset

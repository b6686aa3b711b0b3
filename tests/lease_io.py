"""Lease records written the way the core writes them, for transport tests.

A transport has no call that commits one lease record: the core composes it
from the transport's primitives (`coordination.guarded.commit_lease`). Tests
of a transport write leases through that same composition.
"""

from __future__ import annotations

from coordination.guarded import commit_lease
from coordination.token import FencingToken
from coordination.transport import LeaseWriter


async def write_lease(
    transport: LeaseWriter,
    role: str,
    token: FencingToken,
    partition: int,
    key: bytes,
    value: bytes | None,
) -> int:
    """Commit one lease record in its own transaction of `role`'s producer
    under `token`, as a renewal does; return its offset."""
    return await commit_lease(transport, role, token, partition, key, value)

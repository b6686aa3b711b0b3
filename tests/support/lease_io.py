"""Records of the state topic for transport tests, and lease records written
the way the core writes them.

A transport has no call that commits one lease record: the core composes it
from the transport's primitives (`krabka.guarded.commit_lease`). Tests
of a transport write leases through that same composition.
"""

from __future__ import annotations

from krabka.format.records import (
    Lease,
    Registration,
    encode_key,
    encode_lease,
    encode_registration,
    lease_key,
    registration_key,
)
from krabka.format.token import FencingToken
from krabka.guarded import commit_lease
from krabka.transport import LeaseWriter


def lease_record(role: str, token: FencingToken, member: str = "a") -> tuple[bytes, bytes]:
    """The key and value of a lease of `member` under `token` (times 1 and 2)."""
    lease = Lease(member, token.producer_id, token.producer_epoch, 1, 2)
    return encode_key(lease_key(role)), encode_lease(lease)


def registration_record(role: str, member: str) -> tuple[bytes, bytes]:
    """The key and value of `member`'s registration (registered at 1)."""
    return (encode_key(registration_key(role, member)),
            encode_registration(Registration(member, 1)))


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

"""Joining and leaving a role's roster: registrations on the state topic.

A registration is how a member stands for a role, in both fencing modes: its
offset is the member's rank, and a tombstone removes it. These are the one
composition of those records from the `Registrar`'s plain appends, for the
candidates, the tenures and the runner alike. (A deregistration inside a
first lease's transaction is written by the epoch candidate itself: it must
commit or abort with the lease.)
"""

from __future__ import annotations

from krabka.format.records import Registration, encode_key, encode_registration, registration_key
from krabka.transport import Registrar

__all__ = ["deregister", "register"]


async def register(registrar: Registrar, partition: int, role: str, member: str,
                   now_ms: int) -> int:
    """Append `member`'s registration for `role` (at the tail); return its offset."""
    return await registrar.append(partition, encode_key(registration_key(role, member)),
                                  encode_registration(Registration(member, now_ms)))


async def deregister(registrar: Registrar, partition: int, role: str, member: str) -> int:
    """Append the tombstone of `member`'s registration for `role`; return its offset."""
    return await registrar.append(partition, encode_key(registration_key(role, member)), None)

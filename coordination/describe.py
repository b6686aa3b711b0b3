"""Reading a role's authority and state, for third parties and operators."""

from __future__ import annotations

from coordination.errors import FormatError
from coordination.fold import build_role_state
from coordination.partition import role_partition
from coordination.records import decode_key
from coordination.state import RoleState
from coordination.status import LeadershipStatus
from coordination.transport import Coordinator, StateReader

__all__ = ["describe_leadership", "describe_role_state"]


async def describe_leadership(coordinator: Coordinator, role: str) -> LeadershipStatus:
    """The coordinator's current token for `role`, in one round trip.

    ``describe_leadership(c, role).authoritative(token)`` is how a third party
    checks a writer; a role no member has taken reports `NO_EPOCH`.
    """
    return await coordinator.describe_epoch(role)


async def describe_role_state(reader: StateReader, role: str, partitions: int) -> RoleState:
    """`role`'s roster, lease and skipped records, read to the last stable offset.

    Checks `partitions` against the state topic first. Records of the
    partition whose role hashes to another partition are counted in
    `RoleState.misplaced`.
    """
    await reader.check_topic(partitions, None)
    partition = role_partition(role, partitions)
    read = await reader.read_partition(partition)
    state = build_role_state(role, read.records)
    state.misplaced = sum(
        1 for record in read.records if _misplaced(record.key, partition, partitions)
    )
    return state


def _misplaced(key: bytes, partition: int, partitions: int) -> bool:
    try:
        return role_partition(decode_key(key).role, partitions) != partition
    except FormatError:
        return False

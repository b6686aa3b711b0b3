"""Writing a lease record as the core does: its own transaction of the role's producer."""

from __future__ import annotations

import contextlib

from coordination import FencingToken, LeaseWriter


async def write_lease(transport: LeaseWriter, role: str, token: FencingToken, partition: int,
                      key: bytes, value: bytes | None) -> int:
    """Commit one lease record through `role`'s producer holding `token`; return its offset.

    begin_transaction, the transaction's write_lease, commit; a failed write
    or commit aborts the transaction (best effort) and raises what failed.
    """
    txn = await transport.begin_transaction(role, token)
    try:
        offset = await txn.write_lease(partition, key, value)
        await txn.commit()
    except BaseException:
        with contextlib.suppress(Exception):
            await txn.abort()
        raise
    return offset

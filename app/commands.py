"""Faust CLI commands: ``faust -A app.main roles`` and ``faust -A app.main role ROLE``.

Both read the state topic itself (read_committed, to the last stable
offset) rather than a worker, so they answer with no worker running; ``role``
also asks the transaction coordinator for the role's current token. Output is
the web view's JSON. Exit status: 0, 1 for an unknown role, 2 when the
cluster cannot be reached or the state topic is refused.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from faust.cli import argument

from agents.folding import Unattributed, route
from app.context import Context
from coordination import (
    RoleState,
    Transport,
    build_role_state,
    describe_leadership,
    role_partition,
)
from tables.role_view import detail, skips_of_state, summary

__all__ = ["describe_all", "describe_one", "install"]


async def _partition_states(transport: Transport, partition: int, partitions: int
                            ) -> list[RoleState]:
    read = await transport.read_partition(partition)
    roles: set[str] = set()
    misplaced = 0
    for record in read.records:
        key = route(record, partition, partitions)
        if isinstance(key, Unattributed):
            misplaced += key.kind == "misplaced"
        else:
            roles.add(key.role)
    states = []
    for role in sorted(roles):
        state = build_role_state(role, read.records)
        state.misplaced = misplaced
        states.append(state)
    return states


async def describe_all(transport: Transport, partitions: int, now_ms: int) -> dict[str, Any]:
    """``{"roles": [summary...]}`` for every role in the state topic."""
    await transport.check_topic(partitions, None)
    rows: list[dict[str, Any]] = []
    for partition in range(partitions):
        rows += [summary(s, now_ms) for s in
                 await _partition_states(transport, partition, partitions)]
    return {"roles": sorted(rows, key=lambda row: row["role"]), "now": now_ms}


async def describe_one(transport: Transport, role: str, partitions: int, now_ms: int
                       ) -> dict[str, Any] | None:
    """The role's detail plus the coordinator's current token; None if unknown."""
    await transport.check_topic(partitions, None)
    partition = role_partition(role, partitions)
    states = {s.role: s for s in await _partition_states(transport, partition, partitions)}
    state = states.get(role)
    if state is None:
        return None
    body = detail(state, skips_of_state(state), partition, now_ms)
    status = await describe_leadership(transport, role)
    body["current"] = None if not status.authoritative(status.token) else {
        "producer_id": status.token.producer_id, "producer_epoch": status.token.producer_epoch}
    body["authoritative"] = state.token is not None and status.authoritative(state.token)
    return body


def _print(body: Any) -> None:
    sys.stdout.write(json.dumps(body, indent=2) + "\n")
    sys.stdout.flush()


async def _with_transport(ctx: Context, work: Any) -> int:
    try:
        async with ctx.transport_factory() as transport:
            return int(await work(transport))
    except (TimeoutError, OSError, Exception) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2


def install(ctx: Context) -> None:
    """Register the commands on `ctx.app`."""
    app = ctx.app

    @app.command()
    async def roles(self: Any) -> None:
        """Print every role's holder, token, deadline, status and roster size."""
        async def work(transport: Transport) -> int:
            _print(await describe_all(transport, ctx.partitions, ctx.clock.now_ms()))
            return 0
        _exit(await _with_transport(ctx, work))

    @app.command(argument("role"))
    async def role(self: Any, role: str) -> None:
        """Print one role's roster, lease, skipped records and current token."""
        async def work(transport: Transport) -> int:
            body = await describe_one(transport, role, ctx.partitions, ctx.clock.now_ms())
            if body is None:
                sys.stderr.write(f"error: unknown role {role!r}\n")
                return 1
            _print(body)
            return 0
        _exit(await _with_transport(ctx, work))


def _exit(code: int) -> None:
    if code:
        raise SystemExit(code)

"""Rebalancing in the worker: the library's `krabka.Rebalancer` over this
worker's runners, fed with every hosted role's state and the live members.

Started by the role service once its runners exist, when
``COORDINATION_PLACEMENT=balanced`` and ``COORDINATION_REBALANCE_INTERVAL``
is not 0 (`Settings.rebalancing_off` says why not otherwise); it plans and
hands over at most one role at a time, planning again when that handover has
landed or after an interval (docs/design.md#rebalancing).

- **The roles' states** come from the state topic itself, not from the
  worker's table (`RoleStates`): the table holds only the partitions Faust
  assigned to this worker, and it is in recovery, and the web view answers
  503, exactly while a joining worker makes the group rebalance, which is
  when the plan matters. The library's `describe_roles` gives every hosted
  role's state once, and `watch_roles` (read-only: it registers nothing)
  keeps it current; both fold with the election's own rule
  (docs/decisions/0027-rebalancing-in-the-worker.md). A failure that may
  pass (a `TransportError`: the broker unreachable) is retried, backing off
  from `RETRY` to `RETRY_MAX` seconds; anything else is a bug, which
  retrying cannot mend: it is logged as an error and ends the rebalancing
  (the runners go on), as a bug ends a `LeaderRunner`
  (docs/decisions/0072-rebalancing-over-shared-roles.md).
- **The live members** (`live_members`) are the workers of the Faust
  consumer group (the partition owners the web view routes by; Kafka's
  group coordinator drops a dead one after the session timeout) whose web
  view answers ``GET /health`` now, by the member id it names. A member
  counted live wrongly costs one stagger: the role it is handed goes to the
  next member in order when it does not claim it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

from agents.context import AgentContext
from agents.peers import Unreachable, fetch_json
from krabka import Rebalancer, describe_roles, watch_roles
from krabka.errors import retryable
from krabka.rules.state import RoleState
from krabka.scale.rebalance import Move
from krabka.transport import StateReader

__all__ = ["HEALTH_TIMEOUT", "RETRY", "RETRY_MAX", "RoleStates", "WorkerRebalancing",
           "live_members", "move_json", "rebalance_json", "retry_delay"]

log = logging.getLogger("agents.rebalancing")

HEALTH_TIMEOUT = 2.0
"""Seconds a peer's ``GET /health`` may take before it counts as not live."""
RETRY = 2.0
"""Seconds before the state topic is read again after the watch first failed;
doubled at each failure in a row, up to `RETRY_MAX`."""
RETRY_MAX = 30.0

LiveSource = Callable[[], Awaitable[set[str]]]


class RoleStates:
    """The hosted roles' states, read from the state topic and kept current.

    `ready` is False until the first full read is in (and again after the
    watch failed, until the next one): a plan from half a picture would
    count too few holders.
    """

    def __init__(self, reader: StateReader, partitions: int, roles: Collection[str]) -> None:
        self._reader = reader
        self._partitions = partitions
        self._roles = frozenset(roles)
        self.states: dict[str, RoleState] = {}
        self.ready = False

    async def follow(self, retry: Callable[[int], Awaitable[None]]) -> None:
        """Read every hosted role's state, then follow its changes, until cancelled.

        After a failure that may pass (`krabka.errors.retryable`: the
        broker unreachable) wait for `retry(failures)`, the failures in a row
        since the last full read, and read again. Any other error is a bug: it
        is raised, and `ready` stays False.
        """
        failures = 0
        while True:
            try:
                await self._follow_once()
            except Exception as exc:
                failures = 1 if self.ready else failures + 1
                self.ready = False
                if not retryable(exc):
                    raise
                log.warning("rebalancing: reading the roles' states failed (%r); "
                            "reading again", exc)
                await retry(failures)

    async def _follow_once(self) -> None:
        # The watch starts first, at the topic's end as it is now; the full read
        # that follows ends at or after that point, so no change falls between.
        async with watch_roles(self._reader, self._partitions, roles=self._roles,
                               since="now") as watch:
            described = await describe_roles(self._reader, self._partitions)
            self.states = {state.role: state for state in described
                           if state.role in self._roles}
            self.ready = True
            async for change in watch:
                self.states[change.role] = change.state


def retry_delay(failures: int) -> float:
    """Seconds to wait after `failures` failed reads in a row."""
    return min(RETRY * 2 ** (failures - 1), RETRY_MAX)


async def live_members(ctx: AgentContext) -> set[str]:
    """This worker and every other worker of the Faust group whose web view answers
    ``GET /health`` now, by member id."""
    live = {ctx.member}
    session = ctx.http or ctx.app.http_client

    async def ask(url: str) -> None:
        try:
            status, body = await fetch_json(session, f"{url.rstrip('/')}/health",
                                            HEALTH_TIMEOUT)
        except Unreachable:
            return
        if status == 200 and isinstance(body, dict) and isinstance(body.get("member"), str):
            live.add(body["member"])

    await asyncio.gather(*(ask(url) for url in ctx.router.owners()
                           if not ctx.router.is_self(url)))
    return live


def move_json(move: Move) -> dict[str, Any]:
    """One handover as ``GET /rebalance/`` shows it."""
    return {"role": move.role, "from": move.giver, "to": move.taker, "reason": move.reason,
            "at": move.at_ms}


def rebalance_json(ctx: AgentContext) -> dict[str, Any]:
    """This worker's part of ``GET /rebalance/`` (docs/app.md#web-view)."""
    rebalancer = ctx.rebalancer
    off = ctx.settings.rebalancing_off or ctx.rebalancing_ended
    return {
        "member": ctx.member,
        "enabled": off is None,
        "off": off,
        "interval": ctx.settings.rebalance_interval,
        "plan": None if rebalancer is None or rebalancer.last_plan is None
        else rebalancer.last_plan.to_json(),
        "moves": [] if rebalancer is None else [move_json(m) for m in rebalancer.moves],
    }


class WorkerRebalancing:
    """The worker's `Rebalancer`: its runners, `RoleStates` and `live_members`.

    `live` replaces `live_members` (tests give a fixed set).
    """

    def __init__(self, ctx: AgentContext, reader: StateReader,
                 live: LiveSource | None = None) -> None:
        self.ctx = ctx
        self.states = RoleStates(reader, ctx.partitions, ctx.runners)
        self._live_source = live or (lambda: live_members(ctx))
        self._live: set[str] = {ctx.member}
        self.rebalancer = Rebalancer(ctx.member, ctx.runners, self._states, lambda: self._live,
                                     ctx.clock, interval=ctx.settings.rebalance_interval)
        self._tasks: list[asyncio.Task[None]] = []

    def _states(self) -> Mapping[str, RoleState]:
        return self.states.states

    def start(self) -> None:
        """Follow the states and plan every interval, in tasks of their own."""
        self.ctx.rebalancer = self.rebalancer
        self._tasks = [asyncio.create_task(self.states.follow(self._retry),
                                           name="rebalancing: role states"),
                       asyncio.create_task(self._run(), name="rebalancing: plans")]
        for task in self._tasks:
            task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        """A task that ended on its own ended with a bug: say so, and stop the other
        (plans from states no longer followed would count the wrong holders)."""
        if task.cancelled() or task.exception() is None:
            return
        log.error("%s failed with a bug; member %s stops rebalancing",
                  task.get_name(), self.ctx.member, exc_info=task.exception())
        self.ctx.rebalancing_ended = f"{task.get_name()} failed with a bug: {task.exception()!r}"
        for other in self._tasks:
            other.cancel()

    async def _retry(self, failures: int) -> None:
        clock = self.ctx.clock
        await clock.sleep_until_monotonic(clock.monotonic_ms()
                                          + round(retry_delay(failures) * 1000))

    async def _run(self) -> None:
        # Nothing a plan does may fail and pass (an unreachable peer is not
        # live, `live_members`): an error is a bug, and ends the rebalancing.
        while True:
            await self.rebalancer.next_turn()
            await self.step()

    async def step(self) -> Move | None:
        """Learn who is live, then plan and make at most one handover (none
        while the states are not read yet)."""
        if not self.states.ready:
            return None
        self._live = await self._live_source()
        move = self.rebalancer.step()
        if move is not None:
            self.ctx.metrics.handed_over()
        return move

    async def stop(self) -> None:
        """Stop planning (before the runners stop: no handover during a shutdown).

        A bug that ended the rebalancing was logged when it happened; the
        shutdown goes on past it.
        """
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

"""The worker's role service: one coordination transport and a runner per role.

Started with the app's own services and stopped with the app, so a clean
worker shutdown (SIGTERM, Ctrl-C) resigns every role this worker holds
before the process exits.

When the candidates stand: once the worker's first partition assignment is
in place (Faust has started its transactional producers and opened the
tables of its partitions), not after the table recovery that follows. The
candidates need nothing of the tables: the library follows the state topic
itself. Faust starts services declared with ``app.service`` only after the
first recovery (at least 10 s under exactly_once, docs/app.md), which kept a
restarted worker off the roster that long, so a rolling restart waited for
it at every step. Standing before the assignment is worse: opening the
stores blocks the event loop for seconds, and a role taken then could miss
a short lease (seen with 3 s leases in rolling restarts). Without an
assignment within `ASSIGNMENT_WAIT` seconds (a group that cannot form), the
candidates stand anyway: the roles do not depend on Faust's group.

Under ``balanced`` placement it also runs the worker's rebalancing
(`agents.rebalancing`), and stops it before the runners.

It also freezes the heap (`krabka.scale.heap`) while the roles this worker
leads only grow (after every middle collection, and at each look every 30
s), and settles it in full once one was let go and the roles led stayed the
same for 30 s, so the garbage collector's collections, which stop the event
loop and with it the renewals, walk only what is new since. The worker owns
its process, so it may; the library does not do this on its own.

The transport connects in the background and is retried: a broker that is
down at start-up delays the candidates, it does not crash the worker (the
fold and the web view keep working).
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import AsyncExitStack
from typing import Any

from mode import Service

from agents.context import AgentContext
from agents.rebalancing import WorkerRebalancing
from agents.roles import MetricsObserver, RoleRunner
from krabka.runtime.cancellation import bounded, cancel_and_wait, through_cancellation
from krabka.scale.admission import RenewalLatencyAdmission
from krabka.scale.heap import HeapSettler, freeze_new, settle_heap

__all__ = ["RoleService", "install"]

log = logging.getLogger("agents.service")

CONNECT_RETRY = 2.0
ASSIGNMENT_WAIT = 30.0


class RoleService(Service):
    """Connects the transport, runs the role runners, resigns on stop."""

    def __init__(self, ctx: AgentContext, **kwargs: Any) -> None:
        self.ctx = ctx
        self._stack = AsyncExitStack()
        self._connecting: asyncio.Task[None] | None = None
        self._resigning: asyncio.Task[None] | None = None
        self._rebalancing: WorkerRebalancing | None = None
        self._settling: asyncio.Task[None] | None = None
        self._assigned = asyncio.Event()
        super().__init__(**kwargs)
        ctx.app.on_partitions_assigned.connect(self._on_partitions_assigned)

    async def _on_partitions_assigned(self, sender: Any, /, *args: Any, signal: Any,
                                      **kwargs: Any) -> None:
        self._assigned.set()

    async def on_start(self) -> None:
        self._connecting = asyncio.create_task(self._connect_and_run())
        # Resign before Faust stops its consumer (which can hang without a broker).
        hooks = getattr(self.ctx.app, "before_stop", None)
        if hooks is not None:
            hooks.append(self.resign_all)

    async def _connect_and_run(self) -> None:
        ctx = self.ctx
        try:
            # `bounded`, not wait_for: a stop cancelling this task as the
            # assignment arrives must not be lost, or the runners would start
            # while the worker resigns.
            await bounded(self._assigned.wait(), ASSIGNMENT_WAIT)
        except TimeoutError:
            log.warning("no partition assignment within %.0f s; standing for the roles anyway",
                        ASSIGNMENT_WAIT)
        while True:
            try:
                transport = await self._stack.enter_async_context(ctx.transport_factory())
                break
            except Exception as exc:
                log.warning("cannot connect the coordination transport yet: %r", exc)
                await asyncio.sleep(CONNECT_RETRY)
        ctx.transport = transport
        settings = ctx.settings
        # One admission for the whole worker: it is the process that is busy.
        admission = (RenewalLatencyAdmission(settings.admission_limit, settings.renew_interval,
                                             ctx.clock, rate=settings.admission_rate or None)
                     if settings.admission_limit else None)
        observer = MetricsObserver(ctx.metrics)
        ctx.metrics.stand_for(sorted(ctx.roles), settings.metrics_per_role_limit)
        member = ctx.member
        for name, fn in sorted(ctx.roles.items()):
            options = settings.role_options(ctx.outputs.get(name, ()))
            runner = RoleRunner(transport, name, fn, member, options, clock=ctx.clock,
                                observer=observer, admission=admission)
            ctx.runners[name] = runner
            runner.start()
        log.info("member %s stands for roles %s", member, sorted(ctx.roles))
        self._settling = asyncio.create_task(HeapSettler(
            self._led, clock=ctx.clock, settle=self._settle_heap,
            freeze=self._freeze_heap).run())
        off = ctx.settings.rebalancing_off
        if off is None:
            self._rebalancing = WorkerRebalancing(ctx, transport)
            self._rebalancing.start()
            log.info("member %s rebalances its balanced roles: one handover at a time, "
                     "planning every %.1f s or once the last has landed", member,
                     ctx.settings.rebalance_interval)
        elif ctx.settings.placement == "balanced":
            log.info("member %s does not rebalance: %s", member, off)

    def _led(self) -> frozenset[str]:
        return frozenset(name for name, runner in self.ctx.runners.items() if runner.leading)

    def _settle_heap(self) -> int:
        frozen = settle_heap()
        log.info("member %s settled its heap: %d objects frozen; roles led: %d",
                 self.ctx.member, frozen, len(self._led()))
        return frozen

    def _freeze_heap(self) -> int:
        frozen = freeze_new()
        log.info("member %s froze its heap: %d objects frozen; roles led: %d",
                 self.ctx.member, frozen, len(self._led()))
        return frozen

    async def on_stop(self) -> None:
        await self.resign_all()

    async def resign_all(self) -> None:
        """Stop every runner (resigning held roles) and close the transport; idempotent.

        The resignation runs once, in a task of its own, and every call waits
        for it. A caller cancelled meanwhile gets its cancellation once the
        resignation is over (each runner bounds its own steps): a worker whose
        stop is cancelled still hands its roles back, and the cancellation is
        not lost either.
        """
        if self._resigning is None:
            self._resigning = asyncio.ensure_future(self._resign())
        await through_cancellation(self._resigning)

    async def _resign(self) -> None:
        if self._connecting is not None:
            await cancel_and_wait(self._connecting)
            _log_failure(self._connecting, "connecting the coordination transport")
        if self._rebalancing is not None:
            await self._rebalancing.stop()
        if self._settling is not None:
            await cancel_and_wait(self._settling)
            _log_failure(self._settling, "settling the heap")
        runners = list(self.ctx.runners.values())
        # Resign in parallel: each runner bounds its own steps.
        await asyncio.gather(*(runner.stop() for runner in runners), return_exceptions=True)
        log.info("member %s resigned its roles", self.ctx.member)
        self.ctx.transport = None
        await self._stack.aclose()


def _log_failure(task: asyncio.Task[None], doing: str) -> None:
    """Log the error `task` (ended, its outcome retrieved) ended with, if any."""
    if not task.cancelled() and (error := task.exception()) is not None:
        log.error("%s failed", doing, exc_info=error)


def install(ctx: AgentContext) -> RoleService:
    """Start a `RoleService` with `ctx.app`'s own services (a worker starts them;
    CLI commands do not)."""
    role_service = RoleService(ctx)
    ctx.app.add_dependency(role_service)
    return role_service

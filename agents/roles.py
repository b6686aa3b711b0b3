"""Role runners: the ``@role("name")`` decorator and the candidate loop per role.

Every worker is a candidate for every declared role. A `RoleRunner` runs the
library's candidate loop (`acquire_leadership`) as this worker's member id
and runs the role's function only while this worker leads, passing it the
`Leadership`. The function is cancelled at the first of: a fence (the tenure
ended, `Leadership.done`), the fence deadline (the leader can no longer prove
its lease), or a stop. This is what Faust's ``on_leader=True`` timers lack:
the broker fences the old leader's guarded writes, and the runner stops its
unguarded side effects at the fence deadline.

After a tenure ends the worker becomes a candidate again (at the tail of the
roster: no failback). If the function returns or raises, the worker resigns
so another member takes over at once, and backs off before trying again. On a
clean stop the worker resigns (or, as a candidate, deregisters), each step
bounded so shutdown takes seconds, not a lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from coordination import (
    Clock,
    Leadership,
    LeadershipOptions,
    SystemClock,
    Transport,
    acquire_leadership,
    encode_key,
    registration_key,
    role_partition,
)

__all__ = ["ROLES", "RoleFunction", "RoleRunner", "role"]

log = logging.getLogger("agents.roles")

RoleFunction = Callable[[Leadership], Awaitable[None]]

ROLES: dict[str, RoleFunction] = {}
"""The roles declared with `role`, by name: every worker runs a candidate for each."""

MAX_BACKOFF = 30.0


def role(name: str, *, registry: dict[str, RoleFunction] | None = None
         ) -> Callable[[RoleFunction], RoleFunction]:
    """Declare `name` as a role this worker group elects a leader for.

    The decorated ``async def fn(leadership)`` runs on one worker at a time,
    only while that worker leads; it is cancelled on a fence or at the fence
    deadline. Write side effects through ``leadership.transaction()`` so the
    broker fences a deposed leader's writes.
    """
    if not name:
        raise ValueError("a role name must not be empty")
    declared = ROLES if registry is None else registry

    def decorate(fn: RoleFunction) -> RoleFunction:
        if not asyncio.iscoroutinefunction(fn):
            raise TypeError(f"the function of role {name!r} must be an async def")
        if name in declared and declared[name] is not fn:
            raise ValueError(f"role {name!r} is declared twice")
        declared[name] = fn
        return fn

    return decorate


class Observer(Protocol):
    """What a runner reports (the worker's metrics)."""

    def leading(self, role: str, leading: bool) -> None: ...
    def fenced(self, role: str) -> None: ...
    def resigned(self, role: str) -> None: ...


class _Quiet:
    def leading(self, role: str, leading: bool) -> None:
        pass

    def fenced(self, role: str) -> None:
        pass

    def resigned(self, role: str) -> None:
        pass


class RoleRunner:
    """One role on one worker: candidate while standing by, the function while leading."""

    def __init__(
        self,
        transport: Transport,
        name: str,
        fn: RoleFunction,
        member: str,
        options: LeadershipOptions,
        *,
        clock: Clock | None = None,
        observer: Observer | None = None,
        stop_timeout: float = 5.0,
        retry_interval: float = 1.0,
    ) -> None:
        self.transport = transport
        self.name = name
        self.fn = fn
        self.member = member
        self.options = options
        self.clock = clock or SystemClock()
        self.observer = observer or _Quiet()
        self.stop_timeout = stop_timeout
        self.retry_interval = retry_interval
        self.leadership: Leadership | None = None
        self.tenures = 0
        self.running = False
        """Whether the role's function is running now."""
        self.last_stop: dict[str, object] | None = None
        """When and why the function last stopped (for /health and tests)."""
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> asyncio.Task[None]:
        """Run the candidate loop in a task until `stop`."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"role {self.name}")
        return self._task

    async def stop(self) -> None:
        """Resign (or deregister) and end the loop, bounded by `stop_timeout` per step."""
        self._stop.set()
        if self._task is not None:
            await asyncio.shield(self._task)

    @property
    def leading(self) -> bool:
        """Whether this worker holds the role and may act on it now."""
        return self.leadership is not None and not self.leadership.fenced()

    async def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            leadership = await self._acquire()
            if leadership is None:
                if self._stop.is_set():
                    await self._deregister()
                    return
                failures += 1
                await self._pause(failures)
                continue
            started = self.clock.now_ms()
            await self._lead(leadership)
            if self._stop.is_set():
                return
            # A tenure that ended quickly (the function returned or failed at
            # once, or a fence at once) backs off, so a broken role does not
            # mint an epoch per loop; a long tenure starts the count afresh.
            long = self.clock.now_ms() - started > self.options.lease_ms
            failures = 1 if long else failures + 1
            await self._pause(failures)

    async def _acquire(self) -> Leadership | None:
        """Wait for this worker's turn; None when stopped or on a transport error."""
        options = self.options
        acquiring = asyncio.ensure_future(acquire_leadership(
            self.transport, self.name, self.member, partitions=options.partitions,
            lease_duration=options.lease_duration, renew_interval=options.renew_interval,
            challenge_stagger=options.challenge_stagger, clock=self.clock,
        ))
        stopping = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({acquiring, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        if not acquiring.done():
            acquiring.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await acquiring
            return None
        if acquiring.cancelled():
            return None
        exc = acquiring.exception()
        if exc is not None:
            if isinstance(exc, ValueError):
                raise exc  # a bad role name or option: retrying cannot help
            log.warning("%s: %s could not stand for the role: %r", self.name, self.member, exc)
            return None
        leadership = acquiring.result()
        if self._stop.is_set():
            await self._resign(leadership, deregister=True)
            return None
        return leadership

    async def _lead(self, leadership: Leadership) -> None:
        """Run the function for one tenure, then resign what is left of it."""
        self.leadership = leadership
        self.tenures += 1
        self.observer.leading(self.name, True)
        work = asyncio.create_task(self._call(leadership), name=f"role {self.name} function")
        watchers = [
            asyncio.ensure_future(self._stop.wait()),
            asyncio.ensure_future(self._fence_deadline(leadership)),
        ]
        waiting: set[asyncio.Future[Any]] = {work, leadership.done, *watchers}
        try:
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for watcher in watchers:
                watcher.cancel()
        fenced = leadership.fenced() and not self._stop.is_set()
        if fenced:
            await self._cancel(work)
            self._stopped(leadership, "fenced")
            self._lost(leadership)
            self.observer.fenced(self.name)
            log.warning("%s: %s stopped the role's function: the tenure of %s ended (%s)",
                        self.name, self.member, leadership.token, leadership.err or
                        "fence deadline passed")
            # The tombstone commits only if nobody took over: then a standby
            # need not wait out the lease. The broker rejects it otherwise.
            await self._resign(leadership, deregister=False)
            return
        # A clean stop, or the function ended: resign *before* cancelling, so
        # the function is never cancelled inside a guarded transaction (resign
        # waits for an open one, then refuses new ones with FencedError).
        await self._resign(leadership, deregister=self._stop.is_set())
        await self._cancel(work)
        self._stopped(leadership, "stopped" if self._stop.is_set() else "returned")
        self._lost(leadership)

    def _stopped(self, leadership: Leadership, reason: str) -> None:
        error = None if leadership.err is None else str(leadership.err)
        if error is None and reason == "fenced":
            # This runner's own watch can fire before the library's, which
            # ends the tenure at the same instant.
            error = f"the fence deadline {leadership.fence_deadline} passed"
        self.last_stop = {"at": self.clock.now_ms(), "reason": reason,
                          "token": str(leadership.token), "tenure": leadership.tenure,
                          "fence_deadline": leadership.fence_deadline, "error": error}

    def _lost(self, leadership: Leadership) -> None:
        self.observer.leading(self.name, False)
        self.leadership = None

    async def _call(self, leadership: Leadership) -> None:
        self.running = True
        try:
            await self.fn(leadership)
        except asyncio.CancelledError:
            raise
        except Exception:
            if not (self._stop.is_set() or leadership.fenced()):
                log.exception("%s: the role's function failed; resigning", self.name)
            raise
        else:
            log.info("%s: the role's function returned; resigning", self.name)
        finally:
            self.running = False

    async def _fence_deadline(self, leadership: Leadership) -> None:
        # The library ends the tenure at fence_deadline; this watch does not
        # rely on that: renewals move the deadline, so re-arm until it passes.
        while self.clock.now_ms() < leadership.fence_deadline:
            await self.clock.sleep_until(leadership.fence_deadline)

    async def _cancel(self, work: asyncio.Task[None]) -> None:
        if work.done():
            if not work.cancelled():
                work.exception()  # logged by _call; retrieved so asyncio stays quiet
            return
        work.cancel()
        done, _ = await asyncio.wait({work}, timeout=self.stop_timeout)
        if not done:
            log.error("%s: the role's function ignored cancellation for %.1f s; it may "
                      "still run, but its guarded writes are fenced", self.name,
                      self.stop_timeout)

    async def _resign(self, leadership: Leadership, *, deregister: bool) -> None:
        try:
            await asyncio.wait_for(leadership.resign(deregister=deregister), self.stop_timeout)
        except Exception as exc:  # a resign that fails leaves the lease to lapse
            log.warning("%s: %s could not resign within %.1f s: %r", self.name, self.member,
                        self.stop_timeout, exc)
        else:
            self.observer.resigned(self.name)

    async def _deregister(self) -> None:
        partition = role_partition(self.name, self.options.partitions)
        key = encode_key(registration_key(self.name, self.member))
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.transport.append(partition, key, None), self.stop_timeout)

    async def _pause(self, failures: int) -> None:
        delay = min(self.retry_interval * 2 ** (failures - 1), MAX_BACKOFF)
        until = self.clock.now_ms() + round(delay * 1000)
        sleeping = asyncio.ensure_future(self.clock.sleep_until(until))
        stopping = asyncio.ensure_future(self._stop.wait())
        await asyncio.wait({sleeping, stopping}, return_when=asyncio.FIRST_COMPLETED)
        sleeping.cancel()
        stopping.cancel()

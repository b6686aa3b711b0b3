"""Roles of the worker group: declaring a role, and the runner per role.

Roles are declared on an installation (``installation.role("name")``, see
`app.install`), which keeps them in its own registry through `declare`:
two apps in one process never share roles.

Every worker is a candidate for every declared role. A `RoleRunner` is the
library's `krabka.runner.LeaderRunner` for one declared role on this
worker: the role's function runs only while this worker leads, receives the
`Leadership`, and is cancelled at the first of a fence, the fence deadline
(measured on the monotonic clock) or a stop. On a clean stop the function is
cancelled first and the role resigned after, so a successor never starts
while it still runs. This is what Faust's ``on_leader=True`` timers lack: the
broker fences the old leader's guarded writes, and the runner stops its
unguarded side effects at the fence deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from krabka import (
    LeaderRunner,
    Leadership,
    LeadershipOptions,
    RoleFunction,
    RunnerObserver,
    TenureStop,
    Transport,
)

__all__ = ["MetricsObserver", "RoleFunction", "RoleRunner", "check_outputs", "declare"]


def declare(registry: dict[str, RoleFunction], name: str
            ) -> Callable[[RoleFunction], RoleFunction]:
    """A decorator that declares `name` in `registry` as a role the worker group
    elects a leader for.

    The decorated ``async def fn(leadership)`` runs on one worker at a time,
    only while that worker leads; it is cancelled on a fence or at the fence
    deadline. Write side effects through ``leadership.transaction()`` so the
    broker fences a deposed leader's writes.
    """
    if not name:
        raise ValueError("a role name must not be empty")

    def decorate(fn: RoleFunction) -> RoleFunction:
        if not asyncio.iscoroutinefunction(fn):
            raise TypeError(f"the function of role {name!r} must be an async def")
        if name in registry and registry[name] is not fn:
            raise ValueError(f"role {name!r} is declared twice")
        registry[name] = fn
        return fn

    return decorate


def check_outputs(name: str, outputs: Iterable[str]) -> tuple[str, ...]:
    """`outputs` of role `name` as a tuple of distinct topic names, in the order given.

    A `ValueError` for a bare string (a topic name is not a list of one-letter
    topics), a name that is not a non-empty string, or a name given twice.
    """
    if isinstance(outputs, str | bytes):
        raise ValueError(f"role {name!r}: outputs= takes a list of topic names, not the "
                         f"single {type(outputs).__name__} {outputs!r}")
    declared = tuple(outputs)
    for topic in declared:
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"role {name!r}: an output topic must be a non-empty string, "
                             f"got {topic!r}")
    twice = sorted({topic for topic in declared if declared.count(topic) > 1})
    if twice:
        raise ValueError(f"role {name!r}: output topic(s) {', '.join(twice)} declared twice")
    return declared


class RoleMetrics(Protocol):
    """The worker's metrics, as the runners feed them."""

    def leading(self, role: str, leading: bool) -> None: ...
    def fenced(self, role: str) -> None: ...
    def resigned(self, role: str) -> None: ...
    def lost(self, role: str, reason: str) -> None: ...
    def lease_written(self, role: str, seconds: float) -> None: ...


class MetricsObserver(RunnerObserver):
    """Turns a runner's reports into the worker's metrics."""

    def __init__(self, metrics: RoleMetrics) -> None:
        self._metrics = metrics

    def elected(self, role: str, leadership: Leadership) -> None:
        self._metrics.leading(role, True)
        self._metrics.lease_written(role, leadership.first_lease_latency)

    def renewed(self, role: str, leadership: Leadership, latency: float) -> None:
        self._metrics.lease_written(role, latency)

    def fenced(self, role: str, leadership: Leadership) -> None:
        self._metrics.fenced(role)

    def resigned(self, role: str, leadership: Leadership) -> None:
        self._metrics.resigned(role)

    def lost(self, role: str, leadership: Leadership, stop: TenureStop) -> None:
        self._metrics.lost(role, stop.reason)


class RoleRunner(LeaderRunner):
    """The library's runner for one declared role on this worker."""

    def __init__(self, transport: Transport, name: str, fn: RoleFunction, member: str,
                 options: LeadershipOptions, **kwargs: Any) -> None:
        super().__init__(transport, name, member, fn, options=options, **kwargs)

    @property
    def name(self) -> str:
        """The role's name."""
        return self.role

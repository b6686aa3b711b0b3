"""Short garbage-collector pauses in a process that holds many tenures.

A held role keeps a few hundred long-lived objects: its transactional
producer, that producer's client, connection, sender and their tasks.
CPython's full collection walks every object it tracks, so its pause grows
with the roles held, and the event loop, renewals included, stands still
for it: 0.48 s at 2 000 roles and 0.81 s at 4 000, measured in
docs/benchmarks.md. Renewals that late eat into the fence margin.

`settle_heap` collects once and then moves every surviving object into the
permanent generation (`gc.freeze`), which later collections skip, so they
walk only what is new since. Its own pause is one full collection, which at
10 000 roles is over two seconds. `freeze_new` collects and freezes only
what is not frozen yet, so its pause grows with what was allocated since the
last freeze, not with the heap; it cannot free what was frozen and has since
become garbage.

`HeapSettler` is a small state machine over what the process holds
(`HeapState`). While the tenures only grow (`GROWING`: a start-up taking
thousands of roles), it freezes at each look, and in between after every
collection of the middle generation: what survived two collections is
frozen at once, so neither the middle nor the full collections walk the
roles taken since the last look again and again. A start-up taking 10 000
roles spent 25 s of 104 in collections with a freeze at each look only,
and 2.1 to 4.6 s of 22 to 41 with this (docs/benchmarks.md at ac28ff3, "Freezing
while the roles grow"). Once a look finds nothing new (`STEADY`), the
collector runs as CPython runs it. After a tenure has been let go
(`CHANGED`), it settles in full once the held tenures have stayed the same
for a while, because that is when the frozen heap holds garbage (the
released role's producer) and the long-lived objects are in place.

Opt-in: a library does not own the garbage collector of the process it runs
in. The process that does (the worker application, a service holding many
roles) runs a `HeapSettler`.

Freezing changes how often CPython runs its own full collections: it
counts only what is not frozen, so each freeze at a look also raises the
collector's third threshold in proportion to the frozen heap (`_freeze`).

What it costs: a full settle is itself one full collection, with the pause
that has, once per release of held tenures rather than every few seconds. A
freeze keeps until the next full settle whatever was alive at its instant
and has died since, if only the cycle collector could free it (a campaign's
objects still in flight, a role released between two freezes). Freezing
after every middle collection keeps more of that, for as long as the
tenures grow: 81 to 141 MiB more at the end of a start-up taking 10 000
roles (610 to 670 MiB against 529), kept until a full settle.
"""

from __future__ import annotations

import enum
import gc
from collections.abc import Callable, Set
from typing import Any

from krabka.clock import Clock, SystemClock

__all__ = ["DEFAULT_QUIET_MS", "OLDEST_THRESHOLD", "HeapSettler", "HeapState", "freeze_new",
           "settle_heap"]

DEFAULT_QUIET_MS = 30_000
"""How often `HeapSettler` looks at the held tenures: it freezes at most this
often while they grow, and settles in full only once they stayed unchanged
this long, longer than a campaign and its first renewal, so a burst of
changes settles once, not once per role."""


def settle_heap() -> int:
    """Collect every generation, then freeze what survived; the objects frozen.

    Unfreezing first lets the collection free what an earlier settle froze
    and has since become garbage (a released role's producer), which would
    otherwise stay in memory for good.
    """
    gc.unfreeze()
    gc.collect()
    return _freeze()


def freeze_new() -> int:
    """Collect what is not frozen, then freeze what survived; the objects frozen.

    The frozen objects are not walked, so the pause grows with what was
    allocated since the last freeze. Garbage kept alive only by frozen
    objects stays until the next `settle_heap`.
    """
    gc.collect()
    return _freeze()


OLDEST_THRESHOLD = gc.get_threshold()[2]
"""The collector's third threshold when this module was imported (CPython's
default is 10): the least `_freeze` sets it to."""


def _freeze() -> int:
    """Freeze every tracked object, then space full collections by the frozen heap.

    CPython looks at its oldest generation once per `third threshold`
    collections of the middle one, and collects it only if the objects
    promoted since the last full collection exceed a quarter of those that
    survived it. Frozen objects do not count as survivors, so with most of
    the heap frozen a full collection runs after a small growth, over and
    over: 100 full collections, 17 s of a 69 s acquisition of 10 000 roles
    (docs/benchmarks.md). The quarter rule's total cannot be set, but the
    third threshold can: it is raised so that the oldest generation is looked
    at about once the allocations since the last look could have grown the
    frozen heap by a quarter, as if the frozen objects still counted.
    """
    gc.freeze()
    frozen = gc.get_freeze_count()
    first, second, _third = gc.get_threshold()
    if first > 0 and second > 0:  # a first threshold of 0 turns collection off
        gc.set_threshold(first, second,
                         max(OLDEST_THRESHOLD, frozen // (4 * first * second)))
    return frozen


class HeapState(enum.Enum):
    """What `HeapSettler` saw at its last look at the held tenures."""

    GROWING = "growing"
    """They only grew (or the settler has just started): frozen at each look
    and after every collection of the middle generation."""
    STEADY = "steady"
    """Nothing changed since the last freeze or settle: the collector as usual."""
    CHANGED = "changed"
    """Some were let go: settled in full once they stay the same for a look."""


class HeapSettler:
    """Freezes the heap while `held()` only grows, and settles it in full once
    a tenure has been let go and `held()` has kept its value for `quiet_ms`.

    `held` returns what the process holds: the set of roles it leads, or
    anything comparable that changes when its tenures do. Growth is a set
    that contains the one last frozen or settled; a value that is not a set
    cannot show growth, so every change of it waits for a full settle. It is
    read once every `quiet_ms`, on the monotonic clock. `run` starts in
    `HeapState.GROWING` (a process starts its settler as it starts taking
    roles); the freezing after middle collections stops when `run` ends or
    `close` is called.
    """

    def __init__(self, held: Callable[[], object], *, quiet_ms: int = DEFAULT_QUIET_MS,
                 clock: Clock | None = None,
                 settle: Callable[[], int] = settle_heap,
                 freeze: Callable[[], int] = freeze_new) -> None:
        if quiet_ms <= 0:
            raise ValueError(f"quiet_ms must be positive, not {quiet_ms}")
        self._held = held
        self._quiet_ms = quiet_ms
        self._clock = clock if clock is not None else SystemClock()
        self._settle = settle
        self._freeze = freeze
        self._settled: object = frozenset()  # nothing frozen yet: anything held is growth
        self._last: object = _NEVER
        self.state = HeapState.STEADY

    def step(self) -> int | None:
        """Look at `held()` once: freeze if it only grew since the last freeze or
        settle, settle in full if it shrank or changed and has kept its value
        since the last step; the objects frozen, or None if nothing was done."""
        now, last = self._held(), self._last
        self._last = now
        if now == self._settled:
            self._enter(HeapState.STEADY)
            return None
        if isinstance(now, Set) and isinstance(self._settled, Set) and now >= self._settled:
            self._enter(HeapState.GROWING)
            frozen = self._freeze()
        elif now == last:
            self._enter(HeapState.STEADY)
            frozen = self._settle()
        else:
            self._enter(HeapState.CHANGED)
            return None
        self._settled = now
        return frozen

    async def run(self) -> None:
        """Step every `quiet_ms` until cancelled, growing until the first step."""
        self._enter(HeapState.GROWING)
        try:
            while True:
                await self._clock.sleep_until_monotonic(
                    self._clock.monotonic_ms() + self._quiet_ms)
                self.step()
        finally:
            self.close()

    def close(self) -> None:
        """Stop freezing after middle collections (`STEADY`); idempotent."""
        self._enter(HeapState.STEADY)

    def _enter(self, state: HeapState) -> None:
        growing = self.state is HeapState.GROWING
        self.state = state
        if state is HeapState.GROWING and not growing:
            gc.callbacks.append(self._collected)
        elif state is not HeapState.GROWING and growing:
            gc.callbacks.remove(self._collected)

    def _collected(self, phase: str, info: dict[str, Any]) -> None:
        """A `gc.callbacks` hook: freeze whatever survived a middle or full
        collection. `gc.freeze` only moves the collector's lists, so this adds
        nothing to the pause; counting or re-spacing the frozen heap (as
        `_freeze` does) would walk it, and is left to the next look."""
        if phase == "stop" and info["generation"] >= 1:
            gc.freeze()


_NEVER = object()

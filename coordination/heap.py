"""Short garbage-collector pauses in a process that holds many tenures.

A held role keeps a few hundred long-lived objects: its transactional
producer, that producer's client, connection, sender and their tasks.
CPython's full collection walks every object it tracks, so its pause grows
with the roles held, and the event loop, renewals included, stands still
for it: 0.48 s at 2 000 roles and 0.81 s at 4 000, measured in
docs/benchmarks.md. Renewals that late eat into the fence margin.

`settle_heap` collects once and then moves every surviving object into the
permanent generation (`gc.freeze`), which later collections skip, so they
walk only what is new since. `HeapSettler` calls it each time the tenures a
process holds have changed and then stayed the same for a while, because
that is when the long-lived objects are in place.

Opt-in: a library does not own the garbage collector of the process it runs
in. The process that does (the worker application, a service holding many
roles) runs a `HeapSettler`.

What it costs: the settle itself is one full collection, with the pause
that has, once per change of the held tenures rather than every few
seconds. Frozen objects that become garbage stay in memory until the next
settle, which first unfreezes and collects them.
"""

from __future__ import annotations

import gc
from collections.abc import Callable

from coordination.clock import Clock, SystemClock

__all__ = ["DEFAULT_QUIET_MS", "HeapSettler", "settle_heap"]

DEFAULT_QUIET_MS = 30_000
"""How long the held tenures must stay unchanged before the heap is settled:
longer than a campaign and its first renewal, so a burst of elections at
start-up settles once, not once per role."""


def settle_heap() -> int:
    """Collect every generation, then freeze what survived; the objects frozen.

    Unfreezing first lets the collection free what an earlier settle froze
    and has since become garbage (a released role's producer), which would
    otherwise stay in memory for good.
    """
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


class HeapSettler:
    """Settles the heap whenever `held()` has changed and then kept its value
    for `quiet_ms`.

    `held` returns anything comparable that changes when the process's
    tenures do: the set of roles it leads, or their number where they never
    change hands. It is read once every `quiet_ms`, on the monotonic clock.
    """

    def __init__(self, held: Callable[[], object], *, quiet_ms: int = DEFAULT_QUIET_MS,
                 clock: Clock | None = None,
                 settle: Callable[[], int] = settle_heap) -> None:
        if quiet_ms <= 0:
            raise ValueError(f"quiet_ms must be positive, not {quiet_ms}")
        self._held = held
        self._quiet_ms = quiet_ms
        self._clock = clock if clock is not None else SystemClock()
        self._settle = settle

    async def run(self) -> None:
        """Watch `held()` until cancelled."""
        settled: object = _NEVER
        last = self._held()
        while True:
            await self._clock.sleep_until_monotonic(self._clock.monotonic_ms() + self._quiet_ms)
            now = self._held()
            if now == last and now != settled:
                self._settle()
                settled = now
            last = now


_NEVER = object()

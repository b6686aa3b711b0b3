"""Admission: whether a process takes on one more role now.

A process that stands for more roles than it can renew does not hold fewer:
it loses them. Its renewals queue behind one another, tenures reach their
fence deadlines with their transactions open, those transactions hold the
partitions' stable offsets back, and every candidate holds its challenge
until they are aborted (docs/benchmarks.md measured one worker stall that
way between 5 600 and 5 950 roles). An `Admission` lets a candidate hold
its challenge while its process is overloaded, so the roles it would take
stay with, or go to, members that can renew them.

Guaranteed: an admission only delays this member's challenge or claim. It
changes nothing any member may write and nothing the broker fences, and it
moves no other member's slot: a challenger ranked behind an overloaded one
challenges at its own slot, as it would behind a dead one.

Not guaranteed: a role whose every candidate is overloaded stays vacant
until one of them admits again. A vacancy is visible (the role's status,
the web view); renewals that lose every role are not.

Opt-in, like `krabka.scale.heap`: the load belongs to the process, and the
process decides what overloaded means. `RenewalLatencyAdmission` is the
measure this package provides. Every tenure taken through an admission
tells it how long each of its lease writes took, the first included
(`Admission.lease_written`); nothing else needs to feed it.
"""

from __future__ import annotations

import logging
import math
import random as random_module
from collections.abc import Callable
from typing import Protocol

from krabka.clock import Clock, SystemClock

__all__ = ["Admission", "RenewalLatencyAdmission", "wait_ms"]

log = logging.getLogger("krabka.scale.admission")


class Admission(Protocol):
    """Asked by a candidate whose turn has come, before it challenges; told of
    the lease writes of every tenure it admitted."""

    def closed_for_ms(self) -> int:
        """0 to admit one more role now; otherwise how long, in ms, the
        candidate waits before it asks again (it also wakes on any change of
        its role's state in the meantime)."""
        ...

    def lease_written(self, seconds: float) -> None:
        """A tenure taken through this admission wrote a lease record (its
        first, or a renewal: a heartbeat in term mode) in `seconds`, from
        sending it to the acknowledgement."""
        ...


def wait_ms(admission: Admission | None) -> int:
    """How long a candidate whose turn has come waits before it challenges or
    claims: 0 without an admission (the one rule both fencing modes' candidates
    follow)."""
    return 0 if admission is None else admission.closed_for_ms()


class RenewalLatencyAdmission:
    """Closed for `hold` seconds after a lease write took longer than `limit`
    seconds; with a `rate`, it admits at most that many roles a second.

    A lease write's latency (from sending the lease record to the commit's
    acknowledgement) is the process's queue: the event loop's backlog, its
    connections' and the broker's. It grows before any tenure is lost, and
    one slow write is enough to stop taking roles for a while. Each
    tenure's first lease counts too: a role taken renews only a renew
    interval later, and a process taking roles fast would otherwise learn of
    its load that late. A `hold` of one renew interval lets every held role
    renew once before the next role is taken. A write that closes it logs a
    warning.

    The `rate` is for a process that stands for many roles at once (a
    worker starting with thousands of vacant roles): without it, every
    candidate whose turn has come passes the open admission at the same
    instant, before any lease write could close it. Up to one second's worth
    of roles may be taken at once.

    A candidate told to wait is told a different time than the others, up
    to `hold` later than it could be admitted (`random()` times `hold`):
    thousands of waiting candidates then ask again spread over the hold,
    not all at the instant the admission opens.
    """

    def __init__(self, limit: float, hold: float, clock: Clock | None = None, *,
                 rate: float | None = None,
                 random: Callable[[], float] = random_module.random) -> None:
        if not limit > 0 or not hold > 0:
            raise ValueError(f"limit and hold must be positive seconds, got {limit!r} and "
                             f"{hold!r}")
        if rate is not None and not rate > 0:
            raise ValueError(f"rate must be a positive number of roles a second, got {rate!r}")
        self.limit_ms = round(limit * 1000)
        self.hold_ms = round(hold * 1000)
        self.rate = rate
        self._clock = clock or SystemClock()
        self._random = random
        self._open_at = 0
        self._burst = 1.0 if rate is None else max(1.0, rate)
        self._tokens = self._burst
        self._filled_at = self._clock.monotonic_ms()
        self.closings = 0
        """How many slow lease writes closed it (or kept it closed)."""

    @property
    def closed(self) -> bool:
        """Whether a slow lease write closed it, for less than `hold` ago (asking
        this takes nothing from the rate)."""
        return self._open_at > self._clock.monotonic_ms()

    def lease_written(self, seconds: float) -> None:
        """A lease write took `seconds`: over the limit, it closes for the hold."""
        if seconds * 1000 > self.limit_ms:
            was_open = not self.closed
            self.closings += 1
            self._open_at = max(self._open_at, self._clock.monotonic_ms() + self.hold_ms)
            if was_open:
                log.warning("a lease write took %.2f s, over the admission's limit of %.2f s: "
                            "this process takes no role for %.1f s", seconds,
                            self.limit_ms / 1000, self.hold_ms / 1000)

    def closed_for_ms(self) -> int:
        """0, taking one role off the rate; else the wait, spread as the class says."""
        now = self._clock.monotonic_ms()
        if self._open_at > now:
            return self._spread(self._open_at - now)
        if self.rate is None:
            return 0
        self._tokens = min(self._burst, self._tokens + (now - self._filled_at) * self.rate / 1000)
        self._filled_at = now
        if self._tokens >= 1:
            self._tokens -= 1
            return 0
        return self._spread(math.ceil((1 - self._tokens) * 1000 / self.rate))

    def _spread(self, wait_ms: int) -> int:
        return wait_ms + math.floor(self._random() * self.hold_ms)

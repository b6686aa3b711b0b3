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

Opt-in, like `coordination.heap`: the load belongs to the process, and the
process decides what overloaded means. `RenewalLatencyAdmission` is the
measure this package provides, fed by the renewals of the tenures held.
"""

from __future__ import annotations

from typing import Protocol

from coordination.clock import Clock, SystemClock

__all__ = ["Admission", "RenewalLatencyAdmission"]


class Admission(Protocol):
    """Asked by a candidate whose turn has come, before it challenges."""

    def closed_for_ms(self) -> int:
        """0 to admit one more role now; otherwise how long, in ms, the
        candidate waits before it asks again (it also wakes on any change of
        its role's state in the meantime)."""
        ...


class RenewalLatencyAdmission:
    """Closed for `hold` seconds after a renewal took longer than `limit` seconds.

    A lease write's latency (from sending the lease record to the commit's
    acknowledgement) is the process's queue: the event loop's backlog, its
    connections' and the broker's. It grows before any tenure is lost, and
    one slow write is enough to stop taking roles for a while. Pass
    `renewed` to every tenure's `on_renewed` (`Leadership.on_renewed`), and
    give it each new tenure's `first_lease_latency` too: a role taken renews
    only a renew interval later, and a process taking roles fast would
    otherwise learn of its load that late. A `hold` of one renew interval
    lets every held role renew once before the next role is taken.
    """

    def __init__(self, limit: float, hold: float, clock: Clock | None = None) -> None:
        if not limit > 0 or not hold > 0:
            raise ValueError(f"limit and hold must be positive seconds, got {limit!r} and "
                             f"{hold!r}")
        self.limit_ms = round(limit * 1000)
        self.hold_ms = round(hold * 1000)
        self._clock = clock or SystemClock()
        self._open_at = 0
        self.closings = 0
        """How many slow renewals closed it (or kept it closed)."""

    def renewed(self, _record: object, latency: float) -> None:
        """An `on_renewed` observer: a lease write took `latency` seconds."""
        if latency * 1000 > self.limit_ms:
            self.closings += 1
            self._open_at = max(self._open_at, self._clock.monotonic_ms() + self.hold_ms)

    def closed_for_ms(self) -> int:
        return max(0, self._open_at - self._clock.monotonic_ms())

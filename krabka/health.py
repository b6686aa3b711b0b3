"""Health that means leadership: is every runner that believes it leads still renewing?

A process that runs `LeaderRunner`s can be alive (its event loop turns, its
web server answers) and still useless to its roles: a runner that believes
it leads while its tenure has stopped renewing holds the role for nobody.
`LeadershipHealth` answers the question a liveness probe should ask of such
a process, in the spirit of a leader-election library's health adaptor: a
runner is unhealthy when it is LEADING and its next renewal has been overdue
for longer than `tolerance`; a runner that does not lead (idle, campaigning,
backing off, handing over, stopped) is healthy, and so is a leader whose
renewals are on time.

Overdue is `Leadership.renewal_overdue`: seconds since the renewal was due,
the last renewal's send plus its jittered interval, on the runner's clock
(monotonic, so a `ManualClock` drives the check in tests). It is the same in
both fencing modes: a lease record in epoch mode, a heartbeat in term mode.

Choosing the tolerance: a tenure whose renewals keep failing ends on its own
at its fence deadline, at most ``lease_duration - fence_margin - (1 -
RENEW_JITTER) * renew_interval`` after its renewal was due, and its runner
then no longer leads. A tolerance of at least that long (the lease duration
is) fails only a runner that still believes it leads past its fence
deadline: a wedged one, which a restart cures, and never one merely cut off
from the cluster, which a restart would not. A shorter tolerance also fails
a leader whose renewals are failing, until its fence deadline.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from krabka.errors import ConfigurationError
from krabka.runner import LeaderRunner, RunnerState

__all__ = ["HealthReport", "LeadershipHealth", "OverdueRenewal"]


@dataclass(frozen=True, slots=True)
class OverdueRenewal:
    """A runner that leads `role` as `member` and whose renewal is `overdue`
    seconds past the instant it was due, more than the tolerance."""

    role: str
    member: str
    overdue: float

    def reason(self, tolerance: float) -> str:
        """The sentence a probe's answer gives for it."""
        return (f"role {self.role!r} is led by {self.member!r} but its renewal is "
                f"{self.overdue:.1f} s overdue (tolerance {tolerance:g} s)")


@dataclass(frozen=True, slots=True)
class HealthReport:
    """The answer of one `LeadershipHealth.check`: healthy unless a leading
    runner's renewal is overdue past `tolerance` (`overdue` lists each such runner,
    in the order the runners were given)."""

    tolerance: float
    overdue: tuple[OverdueRenewal, ...] = ()

    @property
    def healthy(self) -> bool:
        """Whether no runner that leads is overdue past the tolerance."""
        return not self.overdue

    @property
    def reasons(self) -> tuple[str, ...]:
        """One sentence per overdue runner, naming the role and by how much."""
        return tuple(late.reason(self.tolerance) for late in self.overdue)


class LeadershipHealth:
    """Checks that every runner of `runners` that leads renews within `tolerance`.

    `runners` is iterated afresh at every `check`, so a live view (a dict's
    ``.values()``) follows the runners added to it later. `tolerance` is in
    seconds past the instant a renewal was due (module docstring: how to
    choose it); it must be positive and finite, else `ConfigurationError`.
    """

    def __init__(self, runners: Iterable[LeaderRunner], *, tolerance: float) -> None:
        if not (math.isfinite(tolerance) and tolerance > 0):
            raise ConfigurationError(
                f"the health tolerance must be a positive number of seconds, got {tolerance!r}")
        self._runners = runners
        self.tolerance = tolerance

    def check(self) -> HealthReport:
        """The report as of now, on each runner's clock."""
        overdue = []
        for runner in self._runners:
            leadership = runner.leadership
            if runner.state is not RunnerState.LEADING or leadership is None:
                continue
            late = leadership.renewal_overdue()
            if late > self.tolerance:
                overdue.append(OverdueRenewal(runner.role, runner.member, late))
        return HealthReport(self.tolerance, tuple(overdue))

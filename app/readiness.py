"""Readiness: the rules that decide whether this worker should get traffic.

A leaf of the worker (it imports only the library): the web view gathers a
`Snapshot` of what the worker knows now and `assess` applies the rules. The
rules are pure, so the unit tests drive them with a `ManualClock` and fakes.
docs/app.md#health lists them with their bounds. A worker is ready when

- its coordination transport has connected;
- the cluster answered a probe (ListOffsets of the state topic, asked by the
  probe agent) no longer than ``cluster_timeout`` ago;
- on each state partition it folds, the fold lag (`fold_lag_of`) is at most
  ``max_fold_lag`` offsets;
- no role it holds has been renewing unsuccessfully for more than half the
  fence margin (the lease keeps the role until the fence deadline, but the
  worker is by then unlikely to keep it);
- it has not been rebalancing or recovering its tables for longer than
  ``max_busy``: a short rebalance does not take it out of service, a stuck one does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from krabka.clock import Clock

__all__ = ["ClusterWatch", "ReadinessBounds", "Snapshot", "Verdict", "assess", "fold_lag_of"]


@dataclass(frozen=True)
class ReadinessBounds:
    """How far a worker may drift before it is not ready (settings in docs/app.md)."""

    cluster_timeout: float = 10.0
    """Seconds without an answer from the cluster."""
    max_fold_lag: int = 1000
    """Offsets the fold may be behind the last stable offset of a partition it folds."""
    max_busy: float = 60.0
    """Seconds a rebalance or a table recovery may last."""

    def __post_init__(self) -> None:
        if not self.cluster_timeout > 0:
            raise ValueError(f"the cluster timeout must be positive, got {self.cluster_timeout}")
        if self.max_fold_lag < 0:
            raise ValueError(f"the fold lag bound must not be negative, got {self.max_fold_lag}")
        if not self.max_busy > 0:
            raise ValueError(f"the rebalance bound must be positive, got {self.max_busy}")


class ClusterWatch:
    """What the probe agent learnt of the cluster, and since when the worker is busy.

    Times are on `clock`'s monotonic milliseconds. The watch starts "never
    answered": a worker is not ready before its first answer from the cluster.
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.answered_at: int | None = None
        self.error: str | None = None
        self.end_offsets: dict[int, int] = {}
        """The state partitions' last stable offsets, from the last answer."""
        self.positions: dict[int, int] = {}
        """The fold's consumer positions on the state partitions it folds, asked
        right after the last answer's offsets."""
        self.busy: str | None = None
        self.busy_since: int | None = None

    def answered(self, end_offsets: Mapping[int, int],
                 positions: Mapping[int, int] | None = None) -> None:
        """The cluster answered a probe with these last stable offsets; the fold's
        consumer was then at `positions` (those it knew)."""
        self.answered_at = self._clock.monotonic_ms()
        self.error = None
        self.end_offsets = dict(end_offsets)
        self.positions = dict(positions or {})

    def failed(self, error: str) -> None:
        """A probe got no answer (`error` says what happened instead)."""
        self.error = error

    def note_busy(self, busy: str | None) -> None:
        """What the worker is doing now: ``"rebalancing"``, ``"recovering"`` or None."""
        if busy is None:
            self.busy, self.busy_since = None, None
        elif self.busy_since is None:
            self.busy, self.busy_since = busy, self._clock.monotonic_ms()
        else:
            self.busy = busy

    def silent_for(self) -> float | None:
        """Seconds since the cluster last answered; None if it never did."""
        if self.answered_at is None:
            return None
        return (self._clock.monotonic_ms() - self.answered_at) / 1000

    def busy_for(self) -> float:
        """Seconds the current rebalance or recovery has lasted (0 when there is none)."""
        if self.busy_since is None:
            return 0.0
        return (self._clock.monotonic_ms() - self.busy_since) / 1000


def fold_lag_of(end: int, committed: int | None, position: int | None,
                in_flight: bool) -> int:
    """The fold lag of one state partition: the offsets between the fold and the
    position a read_committed consumer reaches once caught up.

    `end` is the partition's last stable offset, `committed` the fold's
    committed offset (the next it would read after a restart; None: none yet),
    `position` the fold consumer's position, asked after `end` (None: not
    known), and `in_flight` whether a record it read is not committed yet.
    Commit markers take offsets, and a read_committed consumer's position
    passes them, but no record follows the last ones folded: so once the
    consumer's position has reached `end` and nothing it read is in flight,
    the fold is current and the lag is 0. Otherwise it is every offset from
    the committed one to `end`, markers included (an upper bound of the
    records left to fold).
    """
    if position is not None and position >= end and not in_flight:
        return 0
    return max(0, end - (committed or 0))


@dataclass(frozen=True)
class Snapshot:
    """What one worker knows of itself at one instant, as the rules need it."""

    connected: bool
    """Whether the coordination transport has connected."""
    silent_for: float | None
    """Seconds since the cluster last answered a probe; None if it never did."""
    probe_error: str | None
    fold_lag: Mapping[int, int]
    """Per state partition this worker folds: offsets between its fold and the end."""
    renewals_failing: Mapping[str, float]
    """Per role this worker holds: its tenure's `Leadership.renewal_overdue`."""
    fence_margin: float
    busy: str | None
    busy_for: float


@dataclass(frozen=True)
class Verdict:
    """Ready or not, with every reason why not."""

    ready: bool
    reasons: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    def json(self) -> dict[str, Any]:
        """The body of ``GET /ready``."""
        return {"ready": self.ready, "reasons": self.reasons, **self.details}


def assess(snapshot: Snapshot, bounds: ReadinessBounds) -> Verdict:
    """Apply the readiness rules (module docstring) to `snapshot`."""
    reasons = []
    if not snapshot.connected:
        reasons.append("the coordination transport has not connected to the cluster")
    if snapshot.silent_for is None:
        reasons.append("the cluster has not answered a probe yet"
                       + _because(snapshot.probe_error))
    elif snapshot.silent_for > bounds.cluster_timeout:
        reasons.append(f"the cluster has not answered for {snapshot.silent_for:.1f} s "
                       f"(bound {bounds.cluster_timeout:g} s)" + _because(snapshot.probe_error))
    behind = {p: lag for p, lag in sorted(snapshot.fold_lag.items())
              if lag > bounds.max_fold_lag}
    if behind:
        listed = ", ".join(f"partition {p}: {lag}" for p, lag in behind.items())
        reasons.append(f"the fold is more than {bounds.max_fold_lag} offsets behind the "
                       f"state topic ({listed})")
    limit = snapshot.fence_margin / 2
    for role, failing in sorted(snapshot.renewals_failing.items()):
        if failing > limit:
            reasons.append(f"the lease of role {role!r} has not been renewed for {failing:.1f} s "
                           f"past its renewal (bound: half the fence margin, {limit:g} s)")
    if snapshot.busy is not None and snapshot.busy_for > bounds.max_busy:
        reasons.append(f"{snapshot.busy} for {snapshot.busy_for:.1f} s "
                       f"(bound {bounds.max_busy:g} s)")
    details = {
        "connected": snapshot.connected,
        "cluster_silent_for": snapshot.silent_for,
        "fold_lag": {str(p): lag for p, lag in sorted(snapshot.fold_lag.items())},
        "renewals_failing_for": dict(sorted(snapshot.renewals_failing.items())),
        "busy": snapshot.busy,
        "busy_for": snapshot.busy_for,
    }
    return Verdict(not reasons, reasons, details)


def _because(error: str | None) -> str:
    return "" if error is None else f": {error}"

"""This worker's metrics, rendered in the Prometheus text format (0.0.4).

A few counters, gauges and one histogram kept in memory; no client library
is needed for that. Every worker exports its own figures: roles it holds,
leaderships it won, fences it suffered, how long its lease writes took, and
what the fold skipped on the partitions it owns.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable

__all__ = ["RENEWAL_BUCKETS", "Metrics"]

RENEWAL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

Labels = tuple[tuple[str, str], ...]


def _labels(labels: Labels) -> str:
    if not labels:
        return ""
    body = ",".join(f'{name}="{_escape(value)}"' for name, value in labels)
    return "{" + body + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


class _Histogram:
    def __init__(self, buckets: Iterable[float]) -> None:
        self.bounds = tuple(buckets)
        self.counts = [0] * len(self.bounds)
        self.total = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.total += 1
        self.sum += value
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += 1


class Metrics:
    """The figures one worker exports at ``GET /metrics``."""

    def __init__(self) -> None:
        self.held: dict[str, int] = {}
        self.elections: dict[str, int] = defaultdict(int)
        self.fences: dict[str, int] = defaultdict(int)
        self.resignations: dict[str, int] = defaultdict(int)
        self.events: dict[str, int] = defaultdict(int)
        self.skipped: dict[tuple[str, str], int] = defaultdict(int)
        self.renewals: dict[str, _Histogram] = {}

    def leading(self, role: str, leading: bool) -> None:
        """This worker took (True) or lost (False) `role`."""
        self.held[role] = int(leading)
        if leading:
            self.elections[role] += 1

    def fenced(self, role: str) -> None:
        """This worker's tenure of `role` ended by a fence or at its fence deadline."""
        self.fences[role] += 1

    def resigned(self, role: str) -> None:
        """This worker resigned `role`."""
        self.resignations[role] += 1

    def lease_written(self, role: str, seconds: float) -> None:
        """A lease record of `role` was committed in `seconds`."""
        histogram = self.renewals.setdefault(role, _Histogram(RENEWAL_BUCKETS))
        histogram.observe(seconds)

    def event(self, kind: str) -> None:
        """The fold on this worker published one event of `kind`."""
        self.events[kind] += 1

    def skip(self, partition: int, reason: str) -> None:
        """The fold on this worker skipped one record of `partition`."""
        self.skipped[(str(partition), reason)] += 1

    def render(self) -> str:
        """The Prometheus text exposition of every metric."""
        out: list[str] = []
        self._family(out, "coordination_roles_held", "gauge",
                     "1 while this worker holds the role",
                     [((("role", r),), v) for r, v in sorted(self.held.items())])
        self._family(out, "coordination_elections_total", "counter",
                     "Leaderships this worker won",
                     [((("role", r),), v) for r, v in sorted(self.elections.items())])
        self._family(out, "coordination_fences_total", "counter",
                     "Tenures of this worker ended by a fence or at the fence deadline",
                     [((("role", r),), v) for r, v in sorted(self.fences.items())])
        self._family(out, "coordination_resignations_total", "counter",
                     "Roles this worker resigned",
                     [((("role", r),), v) for r, v in sorted(self.resignations.items())])
        self._family(out, "coordination_events_total", "counter",
                     "Leadership-change events the fold on this worker published",
                     [((("kind", k),), v) for k, v in sorted(self.events.items())])
        self._family(out, "coordination_skipped_records_total", "counter",
                     "State-topic records the fold on this worker skipped",
                     [((("partition", p), ("reason", r)), v)
                      for (p, r), v in sorted(self.skipped.items())])
        out.append("# HELP coordination_lease_write_seconds Time to commit a lease record "
                   "(first lease and renewals)")
        out.append("# TYPE coordination_lease_write_seconds histogram")
        for role, histogram in sorted(self.renewals.items()):
            for bound, count in zip(histogram.bounds, histogram.counts, strict=True):
                labels = _labels((("role", role), ("le", _number(bound))))
                out.append(f"coordination_lease_write_seconds_bucket{labels} {count}")
            labels = _labels((("role", role), ("le", "+Inf")))
            out.append(f"coordination_lease_write_seconds_bucket{labels} {histogram.total}")
            labels = _labels((("role", role),))
            out.append(f"coordination_lease_write_seconds_sum{labels} {histogram.sum!r}")
            out.append(f"coordination_lease_write_seconds_count{labels} {histogram.total}")
        return "\n".join(out) + "\n"

    @staticmethod
    def _family(out: list[str], name: str, kind: str, help_text: str,
                samples: Iterable[tuple[Labels, float]]) -> None:
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            out.append(f"{name}{_labels(labels)} {_number(value)}")

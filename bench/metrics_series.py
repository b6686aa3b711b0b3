"""metrics-series: the series a worker's ``GET /metrics`` costs for each role it
stands for, in each cardinality (docs/app.md, "Series per role").

One `app.metrics.Metrics` (the registry and exposition a worker serves) stands
for N roles (`--series-roles`, default 10 000), once with the per-role limit
below N (the low-cardinality mode, the default above 1 000 roles) and once with
it at N (every role figure labelled by role). Every role then goes through each
event its figures record: a tenure won, a lease written, a fence, a
resignation, and a tenure lost for every reason a runner reports. The
exposition is parsed back as a scraper parses it: each sample, ``_created``
included, is a series. The figure is a count, not a timing; the worst case
(every role through every event) is what a long-lived worker reaches.
"""

from __future__ import annotations

from collections import Counter

from prometheus_client.parser import text_string_to_metric_families

from app.metrics import Cardinality, Metrics
from bench.context import Bench
from bench.stats import Result

REASONS = ("fenced", "stopped", "stepped-down", "returned", "failed")
"""Every ``TenureStop.reason`` a runner reports (`krabka.runner.TenureStop`)."""


def _every_event(metrics: Metrics, role: str) -> None:
    for reason in REASONS:
        metrics.leading(role, True)
        metrics.lease_written(role, 0.01)
        metrics.fenced(role)
        metrics.resigned(role)
        metrics.lost(role, reason)


def _series(metrics: Metrics) -> tuple[Counter[str], int]:
    """Series labelled with each role, and every series of the exposition."""
    body, _ = metrics.render()
    by_role: Counter[str] = Counter()
    total = 0
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            total += 1
            if "role" in sample.labels:
                by_role[sample.labels["role"]] += 1
    return by_role, total


async def metrics_series(bench: Bench) -> None:
    n = bench.series_roles
    roles = [f"series.{i:05d}" for i in range(n)]
    for cardinality, limit in ((Cardinality.LOW, n - 1), (Cardinality.PER_ROLE, n)):
        metrics = Metrics()
        metrics.stand_for(roles, per_role_limit=limit)
        assert metrics.cardinality is cardinality
        stood_for, _ = _series(metrics)
        for role in roles:
            _every_event(metrics, role)
        by_role, total = _series(metrics)
        shared = total - sum(by_role.values())
        bench.add(Result(
            "metrics-series", "krabka", "series", [float(by_role[r]) for r in roles],
            bench.config(roles=n, per_role_limit=limit, reasons=list(REASONS),
                         what="series labelled with each role after every role went "
                              "through every event (a sample per role)"),
            metric=cardinality.value,
            extra={"series_per_role_stood_for": max(stood_for.values()),
                   "series_total": total, "series_not_labelled_by_role": shared}))
        print(f"  [metrics-series] {cardinality.value}: {n} roles, "
              f"{max(by_role.values())} series a role at most "
              f"({max(stood_for.values())} while only stood for), {total} in all, "
              f"{shared} not labelled by role", flush=True)

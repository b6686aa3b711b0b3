"""This worker's metrics: one `prometheus_client` registry per worker.

Each `Metrics` owns a `CollectorRegistry` of its own rather than the
library's global one, so several workers in one process (the tests build
many) never share or collide on a figure. On it:

- the process, platform and garbage-collector collectors of
  `prometheus_client` (``process_open_fds`` matters here: each held role
  costs the worker one or two sockets);
- the coordination figures the role runners and the fold feed (names,
  types and labels in docs/app.md#metrics). The role runners' figures are
  labelled by role, or, for a worker standing for more roles than
  ``COORDINATION_METRICS_PER_ROLE_LIMIT``, only the held gauge is (its
  `Cardinality`): a role then costs the worker one series, not up to 32;
- Faust's own figures, recorded by Faust's `PrometheusMonitor` sensor on the
  same registry (`faust_monitor`), under the fixed prefix ``faust_`` so that
  dashboards do not depend on the app id;
- the fold lag per state partition and the readiness verdict, computed when
  scraped from sources the composition root supplies (`follow_fold_lag`,
  `follow_readiness`): their rules live with the readiness probe
  (`app.health.fold_lag`, `app.readiness.assess`), not here;
- the build: the versions of this package, Python, Faust and aiokafka, one
  constant series (``coordination_build_info``), so that an alert or a
  dashboard can tell which release a worker runs.

`GET /metrics` serves `render`: the format the scraper's ``Accept`` header
asks for (OpenMetrics or the Prometheus text format), as prometheus_client's
own HTTP handlers choose it.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Collection, Iterator, Mapping
from enum import Enum
from typing import TypeVar

import aiokafka
import faust
from faust.sensors.prometheus import FaustMetrics, PrometheusMonitor
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    Info,
    Metric,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from krabka.errors import InvalidStateError
from krabka.runtime.versions import installed_version

__all__ = ["BUILD_INFO", "FAUST_PREFIX", "FOLD_LAG", "READY", "RENEWAL_BUCKETS", "Cardinality",
           "Metrics", "build_labels"]

RENEWAL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
FAUST_PREFIX = "faust"
FOLD_LAG = "coordination_fold_lag_offsets"
READY = "coordination_ready"
BUILD_INFO = "coordination_build_info"

FoldLagSource = Callable[[], Mapping[int, int]]
ReadinessSource = Callable[[], bool]


def build_labels() -> dict[str, str]:
    """The labels of ``coordination_build_info``: this package's installed version
    (as ``krabka --version`` reports it), Python's, Faust's, aiokafka's."""
    return {"version": installed_version(), "python": platform.python_version(),
            "faust": faust.__version__, "aiokafka": aiokafka.__version__}


class _AtScrape(Collector):
    """A gauge read from its source at each scrape; no sample until it has a source.

    A custom collector (prometheus_client's way to export values computed
    when scraped) rather than a `Gauge` set on a timer: the figure is then
    as fresh as ``GET /ready``'s verdict at the same instant.
    """

    def __init__(self, name: str, documentation: str, labels: list[str]) -> None:
        self._name, self._documentation, self._labels = name, documentation, labels
        self.source: Callable[[], Mapping[tuple[str, ...], float]] | None = None

    def describe(self) -> list[Metric]:
        return [self._family()]

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        if self.source is not None:
            for labels, value in self.source().items():
                family.add_metric(list(labels), value)
        yield family

    def _family(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(self._name, self._documentation, labels=self._labels)


class Cardinality(Enum):
    """How many series each role a worker stands for costs it (docs/app.md#metrics)."""

    PER_ROLE = "per-role"
    """Every role figure is labelled by role: up to 32 series a role."""
    LOW = "low"
    """Only `coordination_roles_held` is labelled by role (one series a role); the
    other role figures count all the worker's roles together."""

    @classmethod
    def for_roles(cls, roles: int, limit: int) -> Cardinality:
        """The cardinality of a worker standing for `roles` roles: per role up to
        `limit` of them (``COORDINATION_METRICS_PER_ROLE_LIMIT``), low above."""
        return cls.LOW if roles > limit else cls.PER_ROLE


_Figure = TypeVar("_Figure", Counter, Histogram)


class _RoleFigures:
    """The figures of the role runners but the held gauge, in one cardinality.

    The names and help are the same in both; only the ``role`` label comes
    and goes, so a query that does not group by role reads either.
    """

    def __init__(self, registry: CollectorRegistry, cardinality: Cardinality) -> None:
        self.cardinality = cardinality
        self._registry = registry
        role = ["role"] if cardinality is Cardinality.PER_ROLE else []
        self.elections = Counter(
            "coordination_elections", "Leaderships this worker won", role,
            registry=registry)
        self.fences = Counter(
            "coordination_fences",
            "Tenures of this worker ended by a fence or at the fence deadline", role,
            registry=registry)
        self.resignations = Counter(
            "coordination_resignations", "Roles this worker resigned", role,
            registry=registry)
        self.tenures_lost = Counter(
            "coordination_tenures_lost",
            "Tenures of this worker that ended, by how the role's function stopped",
            [*role, "reason"], registry=registry)
        self.lease_writes = Histogram(
            "coordination_lease_write_seconds",
            "Time to commit a lease record (first lease and renewals)", role,
            buckets=RENEWAL_BUCKETS, registry=registry)

    def of(self, figure: _Figure, role: str, **labels: str) -> _Figure:
        """`figure`'s series for `role` (and `labels`), in this cardinality."""
        if self.cardinality is Cardinality.PER_ROLE:
            labels["role"] = role
        return figure.labels(**labels) if labels else figure

    def unregister(self) -> None:
        for figure in (self.elections, self.fences, self.resignations, self.tenures_lost,
                       self.lease_writes):
            self._registry.unregister(figure)


class Metrics:
    """The figures one worker exports at ``GET /metrics``.

    The role figures start per role, the cardinality of a worker standing for
    no role; `stand_for` settles it once, from the number of roles.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        registry = self.registry
        self.held = Gauge(
            "coordination_roles_held", "1 while this worker holds the role, else 0",
            ["role"], registry=registry)
        self._roles = _RoleFigures(registry, Cardinality.PER_ROLE)
        self._stood_for: int | None = None
        self.handovers = Counter(
            "coordination_rebalance_handovers",
            "Roles this worker handed over to rebalance the group's balanced roles",
            registry=registry)
        self.events = Counter(
            "coordination_events",
            "Leadership-change events the fold on this worker published", ["kind"],
            registry=registry)
        self.skipped = Counter(
            "coordination_skipped_records",
            "State-topic records the fold on this worker skipped", ["partition", "reason"],
            registry=registry)
        self._fold_lag = _AtScrape(
            FOLD_LAG,
            "Offsets between the fold's committed position and the end (last stable "
            "offset) of each state partition this worker folds", ["partition"])
        registry.register(self._fold_lag)
        self._ready = _AtScrape(
            READY, "1 while this worker is ready (GET /ready answers 200), else 0", [])
        registry.register(self._ready)
        Info(BUILD_INFO.removesuffix("_info"),
             "The versions this worker runs: krabka-coordination, Python, Faust, aiokafka",
             registry=registry).info(build_labels())
        self.faust = FaustMetrics.create(registry, FAUST_PREFIX)

    @property
    def cardinality(self) -> Cardinality:
        """How the role figures are labelled now."""
        return self._roles.cardinality

    def stand_for(self, roles: Collection[str], per_role_limit: int) -> None:
        """This worker stands for `roles` (each one's gauge reads 0 until it leads).

        Above `per_role_limit` roles the role figures turn low-cardinality. A
        worker stands for its roles once, before any role figure is recorded:
        the roles a worker stands for are those declared when its role
        service starts, so the cardinality never changes afterwards.
        """
        if self._stood_for is not None:
            raise InvalidStateError(
                f"this worker already stands for its {self._stood_for} roles; "
                "the metrics' cardinality is chosen once")
        self._stood_for = len(roles)
        cardinality = Cardinality.for_roles(len(roles), per_role_limit)
        if cardinality is not self._roles.cardinality:
            self._roles.unregister()
            self._roles = _RoleFigures(self.registry, cardinality)
        for role in roles:
            self.held.labels(role=role).set(0)

    def leading(self, role: str, leading: bool) -> None:
        """This worker took (True) or lost (False) `role`."""
        self.held.labels(role=role).set(int(leading))
        if leading:
            self._roles.of(self._roles.elections, role).inc()

    def fenced(self, role: str) -> None:
        """This worker's tenure of `role` ended by a fence or at its fence deadline."""
        self._roles.of(self._roles.fences, role).inc()

    def resigned(self, role: str) -> None:
        """This worker resigned `role`."""
        self._roles.of(self._roles.resignations, role).inc()

    def lost(self, role: str, reason: str) -> None:
        """A tenure of `role` ended; `reason` is the runner's ``TenureStop.reason``."""
        self.leading(role, False)
        self._roles.of(self._roles.tenures_lost, role, reason=reason).inc()

    def lease_written(self, role: str, seconds: float) -> None:
        """A lease record of `role` was committed in `seconds`."""
        self._roles.of(self._roles.lease_writes, role).observe(seconds)

    def handed_over(self) -> None:
        """This worker stepped down from a role to rebalance the group."""
        self.handovers.inc()

    def event(self, kind: str) -> None:
        """The fold on this worker published one event of `kind`."""
        self.events.labels(kind=kind).inc()

    def skip(self, partition: int, reason: str) -> None:
        """The fold on this worker skipped one record of `partition`."""
        self.skipped.labels(partition=str(partition), reason=reason).inc()

    def follow_fold_lag(self, source: FoldLagSource) -> None:
        """Export `source()` (per state partition: offsets behind) at each scrape."""
        self._fold_lag.source = lambda: {(str(p),): lag for p, lag in sorted(source().items())}

    def follow_readiness(self, source: ReadinessSource) -> None:
        """Export `source()` (whether this worker is ready) as 1 or 0 at each scrape."""
        self._ready.source = lambda: {(): int(source())}

    def faust_monitor(self) -> PrometheusMonitor:
        """A Faust sensor that records Faust's figures on this registry (for ``app.monitor``)."""
        return PrometheusMonitor(metrics=self.faust)

    def render(self, accept: str = "") -> tuple[bytes, str]:
        """Every figure, and its content type, in the format an ``Accept`` header asks
        for (the Prometheus text format 0.0.4 when it names none the library knows)."""
        encode, content_type = choose_encoder(accept)
        return encode(self.registry), content_type

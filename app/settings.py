"""Worker settings, from environment variables with documented defaults.

Every setting has one variable; `docs/app.md` lists them. How to reach the
cluster (bootstrap servers, TLS, SASL) is a `krabka.kafka.Connection`,
read by it from its own ``KAFKA_*`` variables: the worker, the operator CLI
and the topics tool share that one reading. The web port and
data directory are per worker (several local workers need distinct ones);
the member id defaults to ``{hostname}:{web_port}`` so local workers are
distinct members and a StatefulSet pod keeps its id across restarts.
"""

from __future__ import annotations

import functools
import math
import os
import re
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from krabka import LeadershipOptions, defaults
from krabka.kafka.connection import Connection
from krabka.options import FENCINGS, check_fencing
from krabka.rules.evaluate import PLACEMENTS, check_placement

__all__ = ["VARIABLES", "Settings", "mask"]


def _float(name: str, raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number") from None


def _int(name: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer") from None


def _flag(raw: str) -> bool:
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def _text(name: str, raw: str) -> str:
    return raw


_PARSERS: dict[str, Callable[[str, str], Any]] = {
    "str": _text, "str | None": _text, "int": _int, "float": _float, "float | None": _float,
    "Path | None": lambda name, raw: Path(raw),
}
"""How a variable's text becomes a field of each annotated type."""

VARIABLES: Mapping[str, str] = {
    "app_id": "COORDINATION_APP_ID",
    "state_topic": "COORDINATION_STATE_TOPIC",
    "terms_topic": "COORDINATION_TERMS_TOPIC",
    "events_topic": "COORDINATION_EVENTS_TOPIC",
    "partitions": "COORDINATION_PARTITIONS",
    "lease_duration": "COORDINATION_LEASE_DURATION",
    "renew_interval": "COORDINATION_RENEW_INTERVAL",
    "challenge_stagger": "COORDINATION_CHALLENGE_STAGGER",
    "placement": "COORDINATION_PLACEMENT",
    "rebalance_interval": "COORDINATION_REBALANCE_INTERVAL",
    "admission_limit": "COORDINATION_ADMISSION_LIMIT",
    "admission_rate": "COORDINATION_ADMISSION_RATE",
    "metrics_per_role_limit": "COORDINATION_METRICS_PER_ROLE_LIMIT",
    "fencing": "COORDINATION_FENCING",
    "member_id": "COORDINATION_MEMBER_ID",
    "web_host": "COORDINATION_WEB_HOST",
    "web_bind": "COORDINATION_WEB_BIND",
    "web_port": "COORDINATION_WEB_PORT",
    "data_dir": "COORDINATION_DATA_DIR",
    "replication_factor": "COORDINATION_REPLICATION_FACTOR",
    "tick_interval": "COORDINATION_TICK_INTERVAL",
    "commit_interval": "COORDINATION_COMMIT_INTERVAL",
    "session_timeout": "COORDINATION_SESSION_TIMEOUT",
    "ready_probe_interval": "COORDINATION_READY_PROBE_INTERVAL",
    "ready_cluster_timeout": "COORDINATION_READY_CLUSTER_TIMEOUT",
    "ready_max_fold_lag": "COORDINATION_READY_MAX_FOLD_LAG",
    "ready_max_busy": "COORDINATION_READY_MAX_BUSY",
    "health_tolerance": "COORDINATION_HEALTH_TOLERANCE",
    "log_format": "COORDINATION_LOG_FORMAT",
    "demo": "COORDINATION_DEMO",
    "roles_modules": "COORDINATION_ROLES_MODULES",
}
"""The environment variable of each setting but `Settings.connection`, which
reads ``krabka.kafka.connection.VARIABLES`` (docs/app.md lists both)."""

LOG_FORMATS = ("text", "json")
_MODULE = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


MASK = "********"
_SECRET = re.compile(r"PASSWORD|SECRET|TOKEN|CREDENTIAL", re.IGNORECASE)


def mask(name: str, value: Any) -> str:
    """`value` as text, hidden when `name` says it is a secret, and with any
    password in a URL's user part hidden."""
    text = str(value)
    if _SECRET.search(name):
        return MASK if text else ""
    return _mask_url_password(text)


def _mask_url_password(text: str) -> str:
    parts = []
    for item in text.split(","):
        try:
            url = urlsplit(item)
        except ValueError:
            parts.append(item)
            continue
        if url.password is None:
            parts.append(item)
            continue
        host = url.hostname or ""
        netloc = f"{url.username}:{MASK}@{host}" + (f":{url.port}" if url.port else "")
        parts.append(urlunsplit((url.scheme, netloc, url.path, url.query, url.fragment)))
    return ",".join(parts)


@dataclass(frozen=True)
class Settings:
    """What one worker needs to know; `from_env` reads it."""

    connection: Connection = field(default_factory=Connection)
    app_id: str = "krabka-coordination"
    state_topic: str = defaults.STATE_TOPIC
    terms_topic: str = defaults.TERMS_TOPIC
    events_topic: str = "coordination-leadership-changes"
    partitions: int = defaults.PARTITIONS
    lease_duration: float = defaults.LEASE_DURATION
    renew_interval: float = defaults.RENEW_INTERVAL
    challenge_stagger: float = defaults.CHALLENGE_STAGGER
    placement: str = defaults.PLACEMENT
    rebalance_interval: float = 15.0
    """Seconds between two handovers of one worker under ``balanced`` (0: never)."""
    admission_limit: float = 0.0
    """Seconds: after a renewal slower than this the worker takes no role for one
    renew interval (`krabka.scale.admission`; 0: it always takes its turn)."""
    admission_rate: float = 0.0
    """With `admission_limit`: the roles this worker takes a second at most (0: no cap)."""
    metrics_per_role_limit: int = 1000
    """The most roles a worker stands for with every role figure labelled by role;
    above, only the held gauge is (`app.metrics.Cardinality`)."""
    fencing: str = defaults.FENCING
    member_id: str | None = None
    web_host: str = field(default_factory=socket.gethostname)
    web_bind: str = "0.0.0.0"
    web_port: int = 6066
    data_dir: Path | None = None
    replication_factor: int = 1
    tick_interval: float = 1.0
    commit_interval: float = 0.2
    session_timeout: float = 10.0
    ready_probe_interval: float = 2.0
    ready_cluster_timeout: float = 10.0
    ready_max_fold_lag: int = 1000
    ready_max_busy: float = 60.0
    health_tolerance: float | None = None
    """Seconds a role this worker leads may be overdue for its renewal before
    ``GET /health`` fails (None: the lease duration; `liveness_tolerance`)."""
    log_format: str = "text"
    demo: bool = False
    roles_modules: str = ""
    """Modules, comma-separated, that `app.main` imports to declare its roles
    (`role_modules`)."""

    def __post_init__(self) -> None:
        if self.placement not in PLACEMENTS:
            raise ValueError(f"COORDINATION_PLACEMENT={self.placement!r} is not one of "
                             f"{', '.join(PLACEMENTS)}")
        if self.fencing not in FENCINGS:
            raise ValueError(f"COORDINATION_FENCING={self.fencing!r} is not one of "
                             f"{', '.join(FENCINGS)} (docs/term-mode.md)")
        # Fail at start-up, not at the first election, on impossible timings.
        self.leadership_options  # noqa: B018  (validates)
        if self.rebalance_interval < 0:
            raise ValueError(f"COORDINATION_REBALANCE_INTERVAL={self.rebalance_interval} is "
                             "negative; 0 turns rebalancing off")
        if self.placement == "balanced" and 0 < self.rebalance_interval <= self.challenge_stagger:
            raise ValueError(
                f"COORDINATION_REBALANCE_INTERVAL ({self.rebalance_interval} s) must be above "
                f"COORDINATION_CHALLENGE_STAGGER ({self.challenge_stagger} s), so a handover "
                "has settled before the next plan counts it (docs/design.md#rebalancing); "
                "0 turns rebalancing off")
        if self.admission_limit < 0:
            raise ValueError(f"COORDINATION_ADMISSION_LIMIT={self.admission_limit} is "
                             "negative; 0 turns the admission off")
        if self.admission_rate < 0:
            raise ValueError(f"COORDINATION_ADMISSION_RATE={self.admission_rate} is "
                             "negative; 0 leaves the admission uncapped")
        if self.admission_rate and not self.admission_limit:
            raise ValueError("COORDINATION_ADMISSION_RATE is set but COORDINATION_ADMISSION_LIMIT "
                             "is 0: the rate caps an admission, so set the limit too")
        if self.metrics_per_role_limit < 0:
            raise ValueError(f"COORDINATION_METRICS_PER_ROLE_LIMIT={self.metrics_per_role_limit} "
                             "is negative; 0 labels only the held gauge by role")
        if not 0 < self.web_port < 65536:
            raise ValueError(f"web port {self.web_port} is out of range")
        if self.log_format not in LOG_FORMATS:
            raise ValueError(f"COORDINATION_LOG_FORMAT={self.log_format!r} is not one of "
                             f"{', '.join(LOG_FORMATS)}")
        for module in self.role_modules:
            if not _MODULE.fullmatch(module):
                raise ValueError(f"COORDINATION_ROLES_MODULES names {module!r}, which is not a "
                                 "module name (dotted identifiers, comma-separated)")
        if not 0 < self.ready_probe_interval < self.ready_cluster_timeout:
            raise ValueError(
                f"COORDINATION_READY_PROBE_INTERVAL ({self.ready_probe_interval} s) must be "
                f"positive and below COORDINATION_READY_CLUSTER_TIMEOUT "
                f"({self.ready_cluster_timeout} s), or a healthy worker turns unready "
                "between two probes")
        if self.health_tolerance is not None and not (
                math.isfinite(self.health_tolerance) and self.health_tolerance > 0):
            raise ValueError(f"COORDINATION_HEALTH_TOLERANCE={self.health_tolerance} is not a "
                             "positive number of seconds; leave it unset for the lease duration")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Settings from `env` (default: the process environment).

        A variable that is unset or empty leaves the field's default.
        """
        env = os.environ if env is None else env
        values: dict[str, Any] = {"connection": Connection.from_env(env)}
        for item in fields(cls):
            if item.name == "connection":
                continue
            name = VARIABLES[item.name]
            raw = env.get(name, "")
            if item.type == "bool":
                values[item.name] = _flag(raw)
            elif raw != "":
                values[item.name] = _PARSERS[str(item.type)](name, raw)
        return cls(**values)

    @property
    def bootstrap_servers(self) -> str:
        return self.connection.bootstrap_servers

    def member(self, web_port: int | None = None) -> str:
        """This worker's member id: the configured one, else ``{hostname}:{web_port}``.

        `web_port` is the port the worker really serves on (``faust worker
        --web-port`` overrides the environment after the app is built).
        """
        if self.member_id:
            return self.member_id
        return f"{socket.gethostname()}:{web_port or self.web_port}"

    @property
    def rebalancing_off(self) -> str | None:
        """Why this worker does not rebalance its roles, or None if it does."""
        if self.placement != "balanced":
            return f"COORDINATION_PLACEMENT is {self.placement}, not balanced"
        if self.rebalance_interval == 0:
            return "COORDINATION_REBALANCE_INTERVAL is 0"
        if self.term_mode:
            # The plan counts holders by their leases on the state topic; a term-mode
            # holder writes none there (its claims are on the terms topic).
            return "term mode (COORDINATION_FENCING=term) has no leases to count holders by"
        return None

    @property
    def liveness_tolerance(self) -> float:
        """Seconds past its due instant a leading role's renewal may be overdue
        before ``GET /health`` fails (`krabka.health.LeadershipHealth`).

        By default the lease duration: longer than any tenure whose renewals
        fail can last past its renewal's due instant before its fence deadline
        ends it, so only a runner that still believes it leads after that (a
        wedged one) fails liveness, and a worker merely cut off from the
        cluster, which a restart would not help, never does.
        """
        if self.health_tolerance is not None:
            return self.health_tolerance
        return self.lease_duration

    @property
    def role_modules(self) -> tuple[str, ...]:
        """The modules `app.main` imports after installing the coordination: each
        declares roles on ``app.main.installation`` at its import."""
        return tuple(name.strip() for name in self.roles_modules.split(",") if name.strip())

    @property
    def term_mode(self) -> bool:
        """Whether this worker's roles are fenced by terms (``COORDINATION_FENCING=term``)."""
        return self.fencing == "term"

    @functools.cached_property
    def leadership_options(self) -> LeadershipOptions:
        """The options every role's candidate on this worker runs with (before the
        role's own declared outputs, `role_options`).

        Built once per `Settings` (which is frozen): the fold reads them for
        every record it folds and every value it writes."""
        return LeadershipOptions(self.partitions, self.lease_duration, self.renew_interval,
                                 self.challenge_stagger, check_placement(self.placement),
                                 check_fencing(self.fencing))

    def role_options(self, outputs: Iterable[str] = ()) -> LeadershipOptions:
        """The options of one role that declared `outputs`.

        In term mode they are the topics its leader may write, each barriered
        with the term; in epoch mode the broker fences every topic through the
        role's producer, so they are the topics whose metadata the standby
        first in line reads ahead (`LeadershipOptions.outputs`). In both they
        name the Write ACLs the start-up check asks for (`app.access`).
        """
        return replace(self.leadership_options, outputs=tuple(outputs))

    @property
    def datadir(self) -> Path:
        """Faust's data directory (RocksDB tables): one per worker."""
        if self.data_dir is not None:
            return self.data_dir
        return Path("data") / f"worker-{self.web_port}"

    @property
    def canonical_url(self) -> str:
        """The URL other workers use to reach this worker's web server."""
        return f"http://{self.web_host}:{self.web_port}"

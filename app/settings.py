"""Worker settings, from environment variables with documented defaults.

Every setting has one variable; `docs/app.md` lists them. The web port and
data directory are per worker (several local workers need distinct ones);
the member id defaults to ``{hostname}:{web_port}`` so local workers are
distinct members and a StatefulSet pod keeps its id across restarts.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from coordination import LeadershipOptions, defaults

__all__ = ["Settings"]


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number") from None


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer") from None


def _flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class Settings:
    """What one worker needs to know; `from_env` reads it."""

    bootstrap_servers: str = "127.0.0.1:9092"
    app_id: str = "krabka-coordination"
    state_topic: str = defaults.STATE_TOPIC
    events_topic: str = "coordination-leadership-changes"
    partitions: int = defaults.PARTITIONS
    lease_duration: float = defaults.LEASE_DURATION
    renew_interval: float = defaults.RENEW_INTERVAL
    challenge_stagger: float = defaults.CHALLENGE_STAGGER
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
    demo: bool = False

    def __post_init__(self) -> None:
        # Fail at start-up, not at the first election, on impossible timings.
        self.leadership_options  # noqa: B018  (validates)
        if not 0 < self.web_port < 65536:
            raise ValueError(f"web port {self.web_port} is out of range")
        if not 0 < self.ready_probe_interval < self.ready_cluster_timeout:
            raise ValueError(
                f"COORDINATION_READY_PROBE_INTERVAL ({self.ready_probe_interval} s) must be "
                f"positive and below COORDINATION_READY_CLUSTER_TIMEOUT "
                f"({self.ready_cluster_timeout} s), or a healthy worker turns unready "
                "between two probes")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Settings from `env` (default: the process environment)."""
        env = os.environ if env is None else env
        default = cls()
        data_dir = env.get("COORDINATION_DATA_DIR")
        return cls(
            bootstrap_servers=env.get("KAFKA_BOOTSTRAP_SERVERS") or default.bootstrap_servers,
            app_id=env.get("COORDINATION_APP_ID") or default.app_id,
            state_topic=env.get("COORDINATION_STATE_TOPIC") or default.state_topic,
            events_topic=env.get("COORDINATION_EVENTS_TOPIC") or default.events_topic,
            partitions=_int(env, "COORDINATION_PARTITIONS", default.partitions),
            lease_duration=_float(env, "COORDINATION_LEASE_DURATION", default.lease_duration),
            renew_interval=_float(env, "COORDINATION_RENEW_INTERVAL", default.renew_interval),
            challenge_stagger=_float(env, "COORDINATION_CHALLENGE_STAGGER",
                                     default.challenge_stagger),
            member_id=env.get("COORDINATION_MEMBER_ID") or None,
            web_host=env.get("COORDINATION_WEB_HOST") or default.web_host,
            web_bind=env.get("COORDINATION_WEB_BIND") or default.web_bind,
            web_port=_int(env, "COORDINATION_WEB_PORT", default.web_port),
            data_dir=Path(data_dir) if data_dir else None,
            replication_factor=_int(env, "COORDINATION_REPLICATION_FACTOR",
                                    default.replication_factor),
            tick_interval=_float(env, "COORDINATION_TICK_INTERVAL", default.tick_interval),
            commit_interval=_float(env, "COORDINATION_COMMIT_INTERVAL", default.commit_interval),
            session_timeout=_float(env, "COORDINATION_SESSION_TIMEOUT", default.session_timeout),
            ready_probe_interval=_float(env, "COORDINATION_READY_PROBE_INTERVAL",
                                        default.ready_probe_interval),
            ready_cluster_timeout=_float(env, "COORDINATION_READY_CLUSTER_TIMEOUT",
                                         default.ready_cluster_timeout),
            ready_max_fold_lag=_int(env, "COORDINATION_READY_MAX_FOLD_LAG",
                                    default.ready_max_fold_lag),
            ready_max_busy=_float(env, "COORDINATION_READY_MAX_BUSY", default.ready_max_busy),
            demo=_flag(env, "COORDINATION_DEMO"),
        )

    def member(self, web_port: int | None = None) -> str:
        """This worker's member id: the configured one, else ``{hostname}:{web_port}``.

        `web_port` is the port the worker really serves on (``faust worker
        --web-port`` overrides the environment after the app is built).
        """
        if self.member_id:
            return self.member_id
        return f"{socket.gethostname()}:{web_port or self.web_port}"

    @property
    def leadership_options(self) -> LeadershipOptions:
        """The options every role's candidate on this worker runs with."""
        return LeadershipOptions(self.partitions, self.lease_duration, self.renew_interval,
                                 self.challenge_stagger)

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

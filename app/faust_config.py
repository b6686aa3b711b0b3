"""The Faust options the worker sets, and the check that Faust's environment agrees.

Faust lets an environment variable override a constructor argument (``BROKER_URL``
over ``broker=``, ``WEB_PORT`` over ``web_port=``; each setting's variable is its
``env_name`` in ``faust.types.settings``, behind an optional ``APP_ENV_PREFIX``).
Left alone, ``BROKER_URL`` would move the fold to another cluster while the
elections stay on ``KAFKA_BOOTSTRAP_SERVERS``. So the worker refuses to start
when a Faust variable changes an option it sets (or one Faust derives from
them), naming both the Faust variable and the worker's; Faust variables for
options the worker leaves to Faust (``STREAM_BUFFER_MAXSIZE`` and the like) are
accepted. The comparison is Faust's own: the options are parsed once with the
environment and once without, and the two values compared.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import faust

from app.settings import Settings, mask
from krabka.kafka.connection import VARIABLES as CONNECTION_VARIABLES
from krabka.kafka.connection import Connection

__all__ = ["TRANSACTIONAL_BATCH_BYTES", "TRANSACTIONAL_LINGER", "Conflict", "FaustConflictError",
           "broker_credentials", "check", "conflicts", "faust_options", "faust_variables",
           "processing_guarantee", "producer_options", "required_options"]

FIXED = "fixed by the worker"

SOURCES: Mapping[str, str] = {
    "broker": CONNECTION_VARIABLES["bootstrap_servers"],
    "broker_credentials": "the KAFKA_SECURITY_PROTOCOL and KAFKA_SASL_* / KAFKA_SSL_* variables",
    "broker_commit_interval": "COORDINATION_COMMIT_INTERVAL",
    "topic_partitions": "COORDINATION_PARTITIONS",
    "topic_replication_factor": "COORDINATION_REPLICATION_FACTOR",
    "broker_session_timeout": "COORDINATION_SESSION_TIMEOUT",
    "broker_heartbeat_interval": "COORDINATION_SESSION_TIMEOUT",
    "web_port": "COORDINATION_WEB_PORT",
    "web_bind": "COORDINATION_WEB_BIND",
    "web_host": "COORDINATION_WEB_HOST",
    "canonical_url": "COORDINATION_WEB_HOST and COORDINATION_WEB_PORT",
    "datadir": "COORDINATION_DATA_DIR",
}
"""The worker's variable behind each Faust option it sets; the others are `FIXED`."""

DERIVED: Mapping[str, str] = {
    "broker_consumer": "broker",
    "broker_producer": "broker",
}
"""Faust options that default to one the worker sets: overriding them splits it too."""


JSON_LOGGING: Mapping[str, Any] = {
    # Merged by mode into the configuration it builds from ``faust worker -l
    # LEVEL [-f FILE]``: only the two formatters its handlers use change.
    "version": 1,
    "merge": True,
    "formatters": {
        name: {"()": "pythonjsonlogger.json.JsonFormatter",
               "fmt": "%(asctime)s %(levelname)s %(name)s %(process)d %(message)s",
               "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"}}
        for name in ("default", "colored")
    },
}
"""``COORDINATION_LOG_FORMAT=json``: one JSON object per line, for log shippers."""


class FaustConflictError(ValueError):
    """A Faust environment variable contradicts the worker's settings."""


@dataclass(frozen=True)
class Conflict:
    """One Faust option whose environment variable overrides the worker's value."""

    option: str
    variable: str
    """The Faust variable, as Faust reads it (with its ``APP_ENV_PREFIX``)."""
    raw: str
    faust_value: Any
    worker_value: Any

    def __str__(self) -> str:
        source = SOURCES.get(DERIVED.get(self.option, self.option), FIXED)
        raw = mask(self.variable, self.raw)
        theirs, ours = (_shown(self.option, v) for v in (self.faust_value, self.worker_value))
        said = f"{self.variable}={raw!r} makes Faust's {self.option} {theirs}"
        if source == FIXED:
            return f"{said}, but the worker fixes it at {ours}; unset {self.variable}"
        return (f"{said}, but {source} (the worker's setting) makes it {ours}; "
                f"unset {self.variable} or set {source}")


def processing_guarantee(settings: Settings) -> str:
    """Faust's guarantee for the worker's fencing mode (docs/app.md#term-mode).

    Epoch mode: ``exactly_once``, so input is read read_committed (aborted
    lease writes never reach the table) and each partition's table
    changelog, events and offsets commit atomically. Term mode:
    ``at_least_once``, because exactly_once is Faust's transactional
    producers, one per partition, and term mode is for principals and
    services without transactions. The fold is idempotent (a record at or
    below a value's last applied offset changes nothing) and publishes a
    record's events before it writes the value, so a replay after a crash
    repeats events rather than losing them.
    """
    return "at_least_once" if settings.term_mode else "exactly_once"


def required_options(settings: Settings) -> dict[str, Any]:
    """The Faust options every app that hosts the coordination must have
    (`app.install.install` refuses an app without them; docs/app.md)."""
    return {
        "broker": f"kafka://{settings.bootstrap_servers}",
        "processing_guarantee": processing_guarantee(settings),
        # A new group folds the state topic from its start, not from its end.
        "consumer_auto_offset_reset": "earliest",
        # Faust declares the ticks topic and the tables' changelogs.
        "topic_allow_declare": True,
    }


def broker_credentials(
    connection: Connection,
) -> faust.SSLCredentials | faust.SASLCredentials | None:
    """The connection's TLS and SASL settings as Faust's ``broker_credentials``.

    Faust hands them to aiokafka unchanged (``credentials_to_aiokafka_auth``):
    `SASLCredentials` with an SSL context is SASL_SSL, without one
    SASL_PLAINTEXT; `SSLCredentials` is SSL. The TLS context is the
    connection's own, the one the coordination transport uses.
    """
    context = connection.ssl_context()
    if connection.uses_sasl:
        return faust.SASLCredentials(username=connection.sasl_username,
                                     password=connection.password(),
                                     mechanism=connection.sasl_mechanism,
                                     ssl_context=context)
    if context is not None:
        return faust.SSLCredentials(context)
    return None


TRANSACTIONAL_LINGER = 0.05
"""Seconds a producer of the worker holds a batch open under exactly_once (Faust's: 0)."""
TRANSACTIONAL_BATCH_BYTES = 512 * 1024
"""The largest batch of one partition a producer of the worker sends under exactly_once
(Faust's: 16 KiB), below the broker's default largest message (1 MiB)."""


def producer_options(settings: Settings) -> dict[str, Any]:
    """How the worker's Faust producers batch (docs/app.md#exactly-once-and-faust).

    Under exactly_once a partition's events and table writes are read only once
    its transaction commits, and a commit first sends every batch still open
    (aiokafka's ``flush_for_commit``): a batch held open costs their readers
    nothing. Sent at once (Faust's linger of 0), each partition's transactional
    producer sent a request for every few records the fold wrote, and those
    requests were the most of a busy worker's time. Held open for
    `TRANSACTIONAL_LINGER`, a partition's writes go in a few requests per
    commit interval; the plain producer's ticks wait as long at most, against
    a tick interval of a second. At least once (term mode) each event is
    waited for before its value is written, so a linger would delay every
    record: Faust's defaults stay.
    """
    if processing_guarantee(settings) != "exactly_once":
        return {}
    return {"producer_linger": TRANSACTIONAL_LINGER,
            "producer_max_batch_size": TRANSACTIONAL_BATCH_BYTES}


def faust_options(settings: Settings, *, store: str = "rocksdb://") -> dict[str, Any]:
    """The options the worker gives ``faust.App`` (see docs/app.md)."""
    logging_config = {} if settings.log_format == "text" else {"logging_config": JSON_LOGGING}
    credentials = broker_credentials(settings.connection)
    secured = {} if credentials is None else {"broker_credentials": credentials}
    return {
        **logging_config,
        **required_options(settings),
        **secured,
        **producer_options(settings),
        "store": store,
        # Events become visible at commit: commit often.
        "broker_commit_interval": settings.commit_interval,
        "topic_partitions": settings.partitions,
        "topic_replication_factor": settings.replication_factor,
        # A SIGKILLed worker's partitions (and the table view of them) move
        # after the session timeout; Faust's default is 60 s.
        "broker_session_timeout": settings.session_timeout,
        "broker_heartbeat_interval": min(3.0, settings.session_timeout / 3),
        "web_port": settings.web_port,
        "web_bind": settings.web_bind,
        "web_host": settings.web_host,
        "canonical_url": settings.canonical_url,
        "datadir": str(settings.datadir),
        "web_enabled": True,  # `app.faust_app.CoordinationApp` refuses to start without
        "web_stats_enabled": False,
        "web_graph_enabled": False,
        "autodiscover": False,
    }


def conflicts(app_id: str, options: Mapping[str, Any], env: Mapping[str, str]
              ) -> list[Conflict]:
    """Every option in `options` (or `DERIVED` from them) that `env` overrides."""
    with_env = faust.Settings(app_id, **options, env=env)
    without = faust.Settings(app_id, **options, env={})
    found = []
    for option in [*options, *DERIVED]:
        param = faust.Settings.SETTINGS.get(option)
        if param is None or param.env_name is None:
            continue
        raw = with_env.getenv(param.env_name)
        if raw is None:
            continue
        ours, theirs = getattr(without, option), getattr(with_env, option)
        if ours != theirs:
            found.append(Conflict(option, _prefixed(with_env, param.env_name), raw,
                                  theirs, ours))
    return found


def check(app_id: str, options: Mapping[str, Any], env: Mapping[str, str]) -> None:
    """Raise `FaustConflictError` listing every conflict, if any."""
    found = conflicts(app_id, options, env)
    if found:
        raise FaustConflictError(
            "Faust's environment contradicts the worker's settings (docs/app.md#settings):\n"
            + "\n".join(f"- {conflict}" for conflict in found))


def faust_variables(env: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """Every Faust variable set in `env`: its name -> (the Faust option, the raw value)."""
    conf = faust.Settings("check", env=env)
    found = {}
    for option, param in sorted(faust.Settings.SETTINGS.items()):
        if param.env_name is not None and (raw := conf.getenv(param.env_name)) is not None:
            found[_prefixed(conf, param.env_name)] = (option, raw)
    return found


def _prefixed(conf: Any, env_name: str) -> str:
    prefix = conf.env.get(faust.Settings.SETTINGS["env_prefix"].env_name) or ""
    return prefix.rstrip("_") + "_" + env_name if prefix else env_name


def _shown(option: str, value: Any) -> str:
    if isinstance(value, list) and len(value) == 1:  # Faust keeps a broker URL in a list
        value = value[0]
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, (int, float, bool)):
        return repr(value)
    return repr(mask(option, value))

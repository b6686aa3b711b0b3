"""How to reach a Kafka cluster: bootstrap servers, TLS and SASL, in one place.

The worker, the operator CLI and the topics tool each talk to the cluster,
and a secured cluster refuses any of them that connects differently. So the
settings are read here once, from environment variables named like
``KAFKA_BOOTSTRAP_SERVERS`` (and, for the command-line tools, from flags
that override them), and turned here into the aiokafka options every client
needs. The worker maps the same object onto Faust's broker credentials.

Variables (docs/deploy.md shows a managed-cluster configuration):

    KAFKA_BOOTSTRAP_SERVERS    host:port[,host:port...]
    KAFKA_SECURITY_PROTOCOL    PLAINTEXT (default), SSL, SASL_PLAINTEXT, SASL_SSL
    KAFKA_SASL_MECHANISM       PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
    KAFKA_SASL_USERNAME        the SASL user
    KAFKA_SASL_PASSWORD        its password, or
    KAFKA_SASL_PASSWORD_FILE   a file holding it (a mounted secret)
    KAFKA_SSL_CAFILE           CA certificates (PEM) to trust; default: the system's
    KAFKA_SSL_CERTFILE         client certificate (PEM), for mutual TLS
    KAFKA_SSL_KEYFILE          its private key (PEM, unencrypted)
    KAFKA_SSL_CHECK_HOSTNAME   true (default) or false

OAUTHBEARER needs a token provider object, which no environment variable
can carry: a program that uses it passes ``sasl_oauth_token_provider`` to
`KafkaTransport` itself.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from aiokafka.helpers import create_ssl_context  # type: ignore[import-untyped, unused-ignore]

from krabka.errors import ConfigurationError

__all__ = [
    "DEFAULT_BOOTSTRAP",
    "MECHANISMS",
    "PROTOCOLS",
    "VARIABLES",
    "Connection",
    "bootstrap_problem",
]

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
MASK = "********"

VARIABLES: Mapping[str, str] = {
    "bootstrap_servers": "KAFKA_BOOTSTRAP_SERVERS",
    "security_protocol": "KAFKA_SECURITY_PROTOCOL",
    "sasl_mechanism": "KAFKA_SASL_MECHANISM",
    "sasl_username": "KAFKA_SASL_USERNAME",
    "sasl_password": "KAFKA_SASL_PASSWORD",
    "sasl_password_file": "KAFKA_SASL_PASSWORD_FILE",
    "ssl_cafile": "KAFKA_SSL_CAFILE",
    "ssl_certfile": "KAFKA_SSL_CERTFILE",
    "ssl_keyfile": "KAFKA_SSL_KEYFILE",
    "ssl_check_hostname": "KAFKA_SSL_CHECK_HOSTNAME",
}
"""The environment variable of each setting."""

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@dataclass(frozen=True)
class Connection:
    """The settings every client of one cluster shares; `from_env` reads them.

    Construction checks that they fit together (a SASL protocol has a
    mechanism and credentials, TLS files exist), so a mistake is reported at
    start-up with the variable's name, not as a connection that hangs.
    """

    bootstrap_servers: str = DEFAULT_BOOTSTRAP
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    sasl_password_file: str | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_check_hostname: bool = True

    def __post_init__(self) -> None:
        if not self.bootstrap_servers.strip():
            raise ConfigurationError(f"{VARIABLES['bootstrap_servers']} is empty")
        problem = bootstrap_problem(self.bootstrap_servers)
        if problem is not None:
            raise ConfigurationError(
                f"{VARIABLES['bootstrap_servers']}={self.bootstrap_servers!r}: {problem}")
        protocol = self.security_protocol.upper()
        object.__setattr__(self, "security_protocol", protocol)
        if protocol not in PROTOCOLS:
            raise ConfigurationError(
                f"{VARIABLES['security_protocol']}={self.security_protocol!r} is not one of "
                f"{', '.join(PROTOCOLS)}")
        self._check_sasl()
        self._check_tls()

    def _check_sasl(self) -> None:
        sasl_fields = ("sasl_mechanism", "sasl_username", "sasl_password",
                       "sasl_password_file")
        if not self.uses_sasl:
            given = [VARIABLES[name] for name in sasl_fields if getattr(self, name)]
            if given:
                raise ConfigurationError(
                    f"{', '.join(given)} set, but {VARIABLES['security_protocol']}="
                    f"{self.security_protocol} uses no SASL: use SASL_SSL or SASL_PLAINTEXT")
            return
        if self.sasl_mechanism is None:
            raise ConfigurationError(
                f"{VARIABLES['security_protocol']}={self.security_protocol} needs "
                f"{VARIABLES['sasl_mechanism']} (one of {', '.join(MECHANISMS)})")
        mechanism = self.sasl_mechanism.upper()
        object.__setattr__(self, "sasl_mechanism", mechanism)
        if mechanism not in MECHANISMS:
            raise ConfigurationError(
                f"{VARIABLES['sasl_mechanism']}={self.sasl_mechanism!r} is not one of "
                f"{', '.join(MECHANISMS)} (OAUTHBEARER needs a token provider: pass "
                "sasl_oauth_token_provider to KafkaTransport)")
        if not self.sasl_username:
            raise ConfigurationError(f"SASL {mechanism} needs {VARIABLES['sasl_username']}")
        if self.sasl_password and self.sasl_password_file:
            raise ConfigurationError(
                f"set {VARIABLES['sasl_password']} or {VARIABLES['sasl_password_file']}, "
                "not both")
        if self.sasl_password_file:
            _existing(self.sasl_password_file, "sasl_password_file")
        elif not self.sasl_password:
            raise ConfigurationError(
                f"SASL {mechanism} needs {VARIABLES['sasl_password']} or "
                f"{VARIABLES['sasl_password_file']}")

    def _check_tls(self) -> None:
        tls_fields = ("ssl_cafile", "ssl_certfile", "ssl_keyfile")
        if not self.uses_tls:
            given = [VARIABLES[name] for name in tls_fields if getattr(self, name)]
            if given:
                raise ConfigurationError(
                    f"{', '.join(given)} set, but {VARIABLES['security_protocol']}="
                    f"{self.security_protocol} uses no TLS: use SSL or SASL_SSL")
            return
        if bool(self.ssl_certfile) != bool(self.ssl_keyfile):
            raise ConfigurationError(
                f"a client certificate needs both {VARIABLES['ssl_certfile']} and "
                f"{VARIABLES['ssl_keyfile']}")
        for name in tls_fields:
            path = getattr(self, name)
            if path:
                _existing(path, name)

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Connection:
        """The settings the environment gives; unset variables keep the defaults."""
        env = os.environ if environ is None else environ
        given: dict[str, Any] = {}
        for name, variable in VARIABLES.items():
            raw = env.get(variable)
            if raw is None or raw == "":
                continue
            given[name] = _flag(variable, raw) if name == "ssl_check_hostname" else raw
        return cls(**given)

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        """Flags for each setting (``--security-protocol`` ...); they override
        the environment in `from_arguments`."""
        group = parser.add_argument_group(
            "connection", "how to reach the cluster; each flag defaults to its "
            "environment variable")
        for name, variable in VARIABLES.items():
            flag = "--" + name.replace("_", "-")
            if name == "bootstrap_servers":
                group.add_argument(flag, dest=name, default=None, metavar=variable,
                                   type=_bootstrap_argument,
                                   help=f"host:port[,host:port...] (default ${variable})")
            elif name == "ssl_check_hostname":
                group.add_argument(flag, dest=name, default=None,
                                   action=argparse.BooleanOptionalAction,
                                   help=f"verify the broker's host name (${variable})")
            else:
                group.add_argument(flag, dest=name, default=None, metavar=variable,
                                   help=f"default ${variable}")

    @classmethod
    def from_arguments(cls, args: argparse.Namespace,
                       environ: Mapping[str, str] | None = None) -> Connection:
        """The environment's settings with the flags given on the command line over them."""
        base = cls.from_env(environ)
        given = {setting.name: getattr(args, setting.name) for setting in fields(cls)
                 if getattr(args, setting.name, None) is not None}
        return replace(base, **given) if given else base

    def password(self) -> str | None:
        """The SASL password, read from its file when one is given."""
        if self.sasl_password_file:
            try:
                return Path(self.sasl_password_file).read_text(encoding="utf-8").rstrip("\r\n")
            except OSError as exc:
                raise ConfigurationError(
                    f"{VARIABLES['sasl_password_file']}={self.sasl_password_file!r}: "
                    f"cannot read it ({exc.strerror})") from exc
        return self.sasl_password

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context of every client, or None without TLS."""
        if not self.uses_tls:
            return None
        try:
            context: ssl.SSLContext = create_ssl_context(
                cafile=self.ssl_cafile, certfile=self.ssl_certfile, keyfile=self.ssl_keyfile)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigurationError(f"the TLS files do not load: {exc}") from exc
        context.check_hostname = self.ssl_check_hostname
        return context

    def client_options(self) -> dict[str, Any]:
        """The aiokafka options (for `KafkaTransport` and any aiokafka client)."""
        options: dict[str, Any] = {"security_protocol": self.security_protocol}
        context = self.ssl_context()
        if context is not None:
            options["ssl_context"] = context
        if self.uses_sasl:
            options.update(sasl_mechanism=self.sasl_mechanism,
                           sasl_plain_username=self.sasl_username,
                           sasl_plain_password=self.password())
        return options

    def describe(self) -> dict[str, Any]:
        """Every setting by its variable, the password masked: for logs and checks."""
        shown: dict[str, Any] = {}
        for name, variable in VARIABLES.items():
            value = getattr(self, name)
            shown[variable] = MASK if name == "sasl_password" and value else value
        return shown


def bootstrap_problem(servers: str) -> str | None:
    """What is wrong with a bootstrap list, or None if every entry is an address.

    An entry is ``host``, ``host:port``, an IPv6 literal or ``[literal]:port``
    (the forms the Kafka client parses; a missing port is 9092). Checked
    before any connection: the client would otherwise fail on the first
    entry it tries with an error that names no setting.
    """
    if not servers.strip():
        return "it is empty"
    for entry in (part.strip() for part in servers.split(",")):
        problem = _address_problem(entry)
        if problem is not None:
            return problem
    return None


def _address_problem(entry: str) -> str | None:
    if not entry:
        return "an empty entry (two commas, or a comma at an end)"
    if any(char.isspace() for char in entry):
        return f"{entry!r} has a space in it"
    if entry.startswith("["):
        literal, bracket, rest = entry[1:].partition("]")
        if not bracket or not literal:
            return f"{entry!r} is not [IPv6 address] or [IPv6 address]:port"
        if not rest:
            return None
        if not rest.startswith(":"):
            return f"{entry!r}: only :port may follow the bracketed address"
        return _port_problem(entry, rest[1:])
    if entry.count(":") > 1:
        try:
            ipaddress.IPv6Address(entry)
        except ValueError:
            return f"{entry!r} is neither host:port nor an IPv6 address"
        return None
    host, colon, port = entry.partition(":")
    if not host:
        return f"{entry!r} has no host"
    return _port_problem(entry, port) if colon else None


def _port_problem(entry: str, port: str) -> str | None:
    if not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        return f"{entry!r}: the port must be a number from 1 to 65535"
    return None


def _bootstrap_argument(value: str) -> str:
    problem = bootstrap_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return value


def _existing(path: str, name: str) -> None:
    if not Path(path).is_file():
        raise ConfigurationError(f"{VARIABLES[name]}={path!r}: no such file")


def _flag(variable: str, raw: str) -> bool:
    word = raw.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ConfigurationError(f"{variable}={raw!r} is not true or false")

"""The project's own Faust app, built from `Settings`: `create_app`, and
`build`, which installs the coordination on it (`app.install`).

`app.main` builds the worker the CLI runs from environment settings; tests
build their own with a memory store and an in-process transport.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from agents.context import TransportFactory
from app import faust_config
from app.context import Context
from app.faust_app import CoordinationApp
from app.faust_config import faust_options
from app.install import install
from app.settings import Settings
from krabka import RoleFunction
from krabka.clock import Clock

__all__ = ["build", "create_app"]


def create_app(settings: Settings, *, store: str = "rocksdb://",
               env: Mapping[str, str] | None = None) -> CoordinationApp:
    """The Faust app with this project's settings (see docs/app.md).

    Faust reads its own variables from `env` (default: the process
    environment); one that contradicts the worker's settings is refused
    (`app.faust_config.FaustConflictError`).
    """
    env = os.environ if env is None else env
    options = faust_options(settings, store=store)
    faust_config.check(settings.app_id, options, env)
    return CoordinationApp(settings.app_id, **options, env=env)


def build(
    settings: Settings,
    *,
    store: str = "rocksdb://",
    transport_factory: TransportFactory | None = None,
    roles: Mapping[str, RoleFunction] | None = None,
    clock: Clock | None = None,
) -> Context:
    """`create_app` with the coordination installed and `roles` declared, for tests."""
    installation = install(create_app(settings, store=store), settings,
                           transport_factory=transport_factory, clock=clock)
    for name, fn in (roles or {}).items():
        installation.role(name)(fn)
    return installation.context

"""The Faust app class the coordination is installed on: `CoordinationApp`.

Its lifecycle is what the coordination needs of the app that hosts it, and
what no public Faust hook provides: the roles are resigned before Faust
stops its consumer, local tables Faust's own store wrote are rebuilt from
their changelogs at every worker start, every stop ends within a bound, and
``/`` is left to the dashboard. `app.install.install` refuses any other app.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, ClassVar

from faust.web.drivers.aiohttp import Web as AiohttpWeb

from app.faust_changes import ChangedApp
from app.file_limit import raise_file_limit

__all__ = ["CoordinationApp", "CoordinationWeb", "WebDisabledError"]

log = logging.getLogger("app.faust_app")

EXIT_WATCHDOG_SECONDS = 5.0
BEFORE_STOP_SECONDS = 10.0
STOP_WATCHDOG_SECONDS = 10.0


class CoordinationWeb(AiohttpWeb):
    """Faust's aiohttp web server without its index page: ``/`` is the dashboard."""

    production_blueprints: ClassVar[list[Any]] = []
    debug_blueprints: ClassVar[list[Any]] = []


class WebDisabledError(RuntimeError):
    """A worker started without its web server (``faust worker --without-web``)."""


class CoordinationApp(ChangedApp):
    """A Faust app whose web server leaves ``/`` to the dashboard, whose local
    tables are trusted only when the worker's store wrote them, and whose
    shutdown always ends; built of the worker's Faust classes (`app.faust_changes`).

    Tables: the worker's RocksDB store (FAUST-17) writes only committed
    changelog records, with their offset, so a restarted worker keeps its data
    directory and reads only the changelog after it. Faust's own store (on a
    Faust version FAUST-17 was not written for) writes table values to RocksDB
    at once and never records their committed offset under exactly_once: a
    worker stopped with values of a transaction the broker aborts would keep
    them, and the record that caused them would be folded onto them again,
    its events lost. So with Faust's store every worker start removes the
    local tables and rebuilds them from the changelogs.

    Web: a worker refuses to start without its web server (`WebDisabledError`).

    Shutdown: the roles are resigned first (`before_stop` hooks), before
    Faust stops its consumer, which can hang for minutes when the broker is
    gone; a watchdog then bounds the rest of the stop (exit status 1 if it
    fires). And faust-streaming 0.15.3's consumer thread can outlive the
    event loop after a rebalance ("Event loop is closed") and keep the
    process alive: once the app has stopped, a second watchdog ends the
    process (exit status 0) if it has not exited within a few seconds.
    """

    before_stop: list[Callable[[], Awaitable[None]]]
    start_checks: list[Callable[[], Awaitable[None]]]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.before_stop = []
        self.start_checks = []

    def _new_web(self) -> Any:
        return CoordinationWeb(self)

    async def on_stop(self) -> None:
        for hook in self.before_stop:
            try:
                await asyncio.wait_for(hook(), BEFORE_STOP_SECONDS)
            except Exception as exc:
                log.warning("a shutdown step failed: %r", exc)
        _exit_if_stuck(STOP_WATCHDOG_SECONDS, status=1)
        await super().on_stop()

    def forget_local_tables(self) -> None:
        """Remove the RocksDB tables of a previous run: the changelogs are the truth."""
        tables = Path(self.conf.tabledir)
        if tables.exists():
            log.info("rebuilding the tables in %s from their changelogs", tables)
            shutil.rmtree(tables)

    async def on_first_start(self) -> None:
        # Runs once, when a worker starts the app (never for CLI commands).
        raise_file_limit()
        for start_check in self.start_checks:
            await start_check()
        # Checked here, not when the app is built: ``faust worker`` sets
        # web_enabled from its --with-web/--without-web flag after the import.
        if not self.conf.web_enabled:
            raise WebDisabledError(
                "the coordination needs the worker's web server: its peers ask it for the "
                "roles of the partitions it owns, and the probes for /health and /ready; "
                "start the worker without --without-web (and web_enabled=False)")
        if not self.worker_classes.keeps_local_tables:
            self.forget_local_tables()
        await super().on_first_start()

    async def on_shutdown(self) -> None:
        await super().on_shutdown()
        _exit_if_stuck(EXIT_WATCHDOG_SECONDS, status=0)


def _exit_if_stuck(seconds: float, *, status: int) -> None:
    def watchdog() -> None:
        time.sleep(seconds)
        log.warning("the worker was still stopping %.0f s later (a Faust thread or a broker "
                    "that is gone); exiting with status %d", seconds, status)
        logging.shutdown()
        os._exit(status)

    threading.Thread(target=watchdog, name="exit watchdog", daemon=True).start()

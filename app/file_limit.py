"""The worker's open-file limit: raised where it can be, and what it allows.

Each role a worker leads in epoch mode has a transactional producer of its
own (the epoch binds to one producer, docs/design.md#the-safety-argument),
and each producer keeps one connection to each broker it talks to: the
state partition's leader and the role's transaction coordinator, one broker
or two (`krabka.kafka.producer.one_connection`). Two descriptors per held role
is the bound used here; on a one-broker cluster it is one (measured in
docs/benchmarks.md). Standbys cost
none (every role's tail shares the worker's consumers), nor does a term-mode
tenure (the worker's one idempotent producer writes for all of them). A
default soft limit of 1 024 would stop a worker at about 400 held roles, so
the worker raises its soft limit to the hard limit at start-up, as servers
do, and says how many held roles the limit allows.
"""

from __future__ import annotations

import logging
import resource
from dataclasses import dataclass

__all__ = ["FDS_PER_HELD_ROLE", "RESERVED_FDS", "FileLimit", "raise_file_limit"]

log = logging.getLogger("app.file_limit")

FDS_PER_HELD_ROLE = 2
"""File descriptors an epoch-mode held role costs at most (its producer's connections)."""
RESERVED_FDS = 256
"""Descriptors kept for everything else: RocksDB, the consumers, the web server."""


@dataclass(frozen=True, slots=True)
class FileLimit:
    """The soft and hard open-file limits after start-up, and what they allow."""

    soft: int
    hard: int
    raised_from: int | None

    @property
    def held_roles(self) -> int:
        """How many roles the soft limit lets this worker lead in epoch mode."""
        return max(0, (self.soft - RESERVED_FDS) // FDS_PER_HELD_ROLE)


def raise_file_limit() -> FileLimit:
    """Raise the soft open-file limit to the hard limit, if it is lower; log what it allows.

    An unlimited hard limit is capped at what the kernel takes for a soft
    one (setrlimit refuses RLIM_INFINITY for RLIMIT_NOFILE on Linux); a
    refusal leaves the limit as it was and is logged.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    raised_from = None
    target = hard if hard != resource.RLIM_INFINITY else 1_048_576
    if soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            raised_from, soft = soft, target
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-file limit from %d to %d: %s", soft,
                        target, exc)
    limit = FileLimit(soft, hard, raised_from)
    log.info("open-file limit %d%s: enough to lead about %d roles in epoch mode (%d "
             "descriptors each, %d kept for the rest); standbys and term-mode roles cost none",
             soft, "" if raised_from is None else f" (raised from {raised_from})",
             limit.held_roles, FDS_PER_HELD_ROLE, RESERVED_FDS)
    return limit

"""The worker app (`app.main`) for the recovery regression test, with the
seek's argument check moved before the hand-off to the consumer thread.

``faust -A tests.app.faust_seek_check worker`` runs the service's own app. One
thing differs: Faust's ``Recovery._seek_offsets`` checks the offsets it is
about to seek *before* it hands them to the consumer thread, with the check
aiokafka's ``AIOKafkaConsumer.seek`` makes there (an int, not negative; Faust
maps -1 to 0 first). No offset that aiokafka accepts is refused, so the worker
behaves as `app.main` does, except for timing. And its table recovery keeps
Faust's own ten idle seconds at the end (`app.faust_patches`' patch 4 is
undone), so a worker started meanwhile does rebalance the group during the
recovery: with the patch a small recovery is over before a second worker has
joined.

Why: faust-streaming 0.15.3's recovery seeks the offsets of a rebalance that
has been superseded (docs/upstream-faust.md). The ``ValueError`` aiokafka
raises then reaches Faust's recovery only if the consumer thread answers
before the main loop notices the new rebalance; otherwise Faust restarts the
recovery and nothing shows. On the real broker that race goes either way, so
a test of the bug would pass by luck about as often as it fails. Checking in
the main loop makes the bad seek fail every time it is attempted, which the
fix in `app.faust_patches` prevents (it never starts the seek of a
superseded recovery).
"""

from __future__ import annotations

from typing import Any

from faust.tables import manager, recovery

from app import faust_patches
from app.main import app, context, settings

__all__ = ["app", "context", "settings"]

_seek_offsets = recovery.Recovery._seek_offsets


async def _checked_seek_offsets(self: Any, consumer: Any, tps: Any, offsets: Any,
                                title: str) -> None:
    for tp in tps:
        offset = offsets[tp]
        offset = 0 if offset == -1 else offset
        if not isinstance(offset, int) or offset < 0:
            raise ValueError(f"Offset must be a positive integer ({title} {tp}: {offset!r}; "
                             "checked before the consumer thread, tests/app/faust_seek_check.py)")
    await _seek_offsets(self, consumer, tps, offsets, title)


recovery.Recovery._seek_offsets = _checked_seek_offsets

manager.TableManager.changelog_queue = faust_patches.FAUST_CHANGELOG_QUEUE  # type: ignore[method-assign]

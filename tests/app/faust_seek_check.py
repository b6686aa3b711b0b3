"""The worker app (`app.main`) for the recovery regression test, with the
seek's argument check moved before the hand-off to the consumer thread.

``faust -A tests.app.faust_seek_check worker`` runs the service's own app. One
thing differs: Faust's ``Recovery._seek_offsets`` checks the offsets it is
about to seek *before* it hands them to the consumer thread, with the check
aiokafka's ``AIOKafkaConsumer.seek`` makes there (an int, not negative; Faust
maps -1 to 0 first). No offset that aiokafka accepts is refused, so the worker
behaves as `app.main` does, except for timing. And its table recovery is
Faust's own loop with Faust's own ten idle seconds at the end (this app's
recovery leaves the changelogs to that loop, not to FAUST-17's bulk read, and
its table manager has Faust's changelog queue, not FAUST-2's), so a worker
started meanwhile does rebalance the group during the recovery: with FAUST-2
and FAUST-17 a small recovery is over before a second worker has joined.

Why: faust-streaming 0.15.3's recovery seeks the offsets of a rebalance that
has been superseded (docs/upstream/FAUST-1.md). The ``ValueError`` aiokafka
raises then reaches Faust's recovery only if the consumer thread answers
before the main loop notices the new rebalance; otherwise Faust restarts the
recovery and nothing shows. On the real broker that race goes either way, so
a test of the bug would pass by luck about as often as it fails. Checking in
the main loop makes the bad seek fail every time it is attempted, which the
worker's change FAUST-1 (`app.faust_changes`) prevents (it never starts the seek of a
superseded recovery).
"""

from __future__ import annotations

from typing import Any

from app.main import app, context, settings

__all__ = ["app", "context", "settings"]


class CheckedRecovery(type(app.tables).Recovery):  # type: ignore[misc]
    """The worker's recovery, whose seek checks its offsets in the main loop."""

    async def _seek_offsets(self, consumer: Any, tps: Any, offsets: Any, title: str) -> None:
        for tp in tps:
            offset = offsets[tp]
            offset = 0 if offset == -1 else offset
            if not isinstance(offset, int) or offset < 0:
                raise ValueError(f"Offset must be a positive integer ({title} {tp}: "
                                 f"{offset!r}; checked before the consumer thread, "
                                 "tests/app/faust_seek_check.py)")
        await super()._seek_offsets(consumer, tps, offsets, title)

    async def _read_active(self, tps: Any, destination: Any, wiped: int) -> None:
        """Nothing: Faust's own recovery loop reads the active changelogs."""


# On this app's table manager only: no class of Faust's or the worker's is changed.
app.tables.Recovery = CheckedRecovery
app.tables._changelog_queue = app.FlowControlQueue(  # Faust's own: idle polls of 5 s
    maxsize=app.conf.stream_buffer_maxsize, clear_on_resume=True)

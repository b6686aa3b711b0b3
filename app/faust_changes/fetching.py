"""The worker's changes to Faust's consumer thread (``AIOKafkaConsumerThread``), the
aiokafka consumer that fetches for the main loop (`app.faust_changes.registry`
declares them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["FETCH_BACKOFF", "FETCH_MAX_WAIT_MS", "ActiveOnly", "ActivePartitionsOnly",
           "HighwatersFromTheBroker", "NoFetchBackoff", "ShortLongPoll", "no_fetch_backoff",
           "short_long_poll"]

FETCH_BACKOFF = 0.0
"""Seconds aiokafka's fetcher holds back a broker's fetch while a partition of it has
records the consumer has not taken (aiokafka's own: 0.1; FAUST-8)."""

FETCH_MAX_WAIT_MS = 100
"""Milliseconds a fetch of the consumer thread waits for records (Faust's: 1 500; FAUST-9)."""


def no_fetch_backoff(consumer: Any) -> None:
    """Let a started aiokafka consumer fetch a broker's other partitions while one of
    them still holds records (`FETCH_BACKOFF`); the fetcher reads the value at each
    fetch, and exists only once the consumer has started."""
    consumer._fetcher._prefetch_backoff = FETCH_BACKOFF


def short_long_poll(consumer: Any) -> None:
    """Let a started aiokafka consumer's fetches wait `FETCH_MAX_WAIT_MS` for records,
    so the requests behind them on the connection wait no longer."""
    consumer._fetcher._fetch_max_wait_ms = FETCH_MAX_WAIT_MS


class NoFetchBackoff:
    """FAUST-8: the started consumer's fetcher has no prefetch backoff. A partition
    whose records are still held is left out of the next fetch either way, so a
    lease on another partition is fetched without waiting for it to be drained."""

    _consumer: Any

    async def on_start(self) -> None:
        await super().on_start()  # type: ignore[misc]
        no_fetch_backoff(self._consumer)


class ShortLongPoll:
    """FAUST-9: the started consumer's fetches wait 0.1 s for records, so a
    ListOffsets sent behind one on the same connection (the table recovery's,
    the readiness probe's) waits no longer than that."""

    _consumer: Any

    async def on_start(self) -> None:
        await super().on_start()  # type: ignore[misc]
        short_long_poll(self._consumer)


class HighwatersFromTheBroker:
    """FAUST-15: a partition's high watermark is asked of the broker (ListOffsets with
    the consumer's isolation level: the last stable offset under read_committed),
    never read from aiokafka's cache, which is empty until the partition is fetched.
    A copy of Faust's method, applied only on the version it was written for."""

    async def _highwaters(self, partitions: Iterable[Any]) -> Mapping[Any, int]:
        consumer = self._ensure_consumer()  # type: ignore[attr-defined]
        offsets: Mapping[Any, int] = await consumer.end_offsets(list(partitions))
        return offsets


class ActiveOnly:
    """The consumer's active partitions as aiokafka's ``Fetcher.fetched_records``
    filters by them.

    A live view of Faust's set, so a partition resumed while the fetcher waits
    for records is seen the next time it looks (when any records arrive), and
    true even when the set is empty, where aiokafka would read an empty filter
    as every partition. The consumer thread reads it while the main loop
    changes the set, as it read the set."""

    __slots__ = ("_active",)

    def __init__(self, active: Any) -> None:
        self._active = active

    def __bool__(self) -> bool:
        return True

    def __contains__(self, tp: object) -> bool:
        return tp in self._active


class ActivePartitionsOnly:
    """FAUST-14: aiokafka is asked for the records of the active partitions only,
    and for none while none is active (an empty filter is every partition to it)."""

    async def _fetch_records(self, consumer: Any, active_partitions: Any,
                             timeout: float | None = None,  # noqa: ASYNC109 (Faust's)
                             max_records: int | None = None) -> Any:
        # Faust types the filter as a set; aiokafka only tests it for truth and membership.
        partitions: Any = None if active_partitions is None else ActiveOnly(active_partitions)
        return await super()._fetch_records(  # type: ignore[misc]
            consumer, partitions, timeout=timeout, max_records=max_records)

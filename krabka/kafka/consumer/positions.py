"""Where a consumer stands in a partition, read without yielding to the loop.

aiokafka keeps a partition's fetch position, last stable offset and high
watermark in its subscription state. The stable offset and the high watermark
are updated together from each Fetch response; the position moves only when
records (or skipped control and aborted batches) are consumed. Reading the
three in one synchronous step, right after ``getmany`` returned, gives a
consistent view: ``position >= last_stable_offset`` means every committed
record below the stable offset has been consumed. ``consumer.position()`` is
a coroutine that can wait for an offset reset, so the position is read from
the subscription state directly (`krabka.kafka.aiokafka_internals.fetch_position`).

`answers` tells a reader when the next Fetch response has been taken in.
aiokafka's ``getmany`` wakes only for records: a fetch that shows a partition
has nothing new (its stable offset already reached) leaves ``getmany`` waiting
out its whole timeout, and a standby's read of what is new after the tail
delivered it is exactly that case, on the handover's path.
"""

from __future__ import annotations

import asyncio
from typing import Any

from krabka.kafka.aiokafka_internals import fetch_position, on_fetch_response

__all__ = ["answers", "marks", "position"]


def position(consumer: Any, tp: Any) -> int | None:
    """The next offset `consumer` fetches in `tp`, or None while it is being reset."""
    return fetch_position(consumer, tp)


def marks(consumer: Any, tp: Any) -> tuple[int | None, int | None]:
    """(last stable offset, high watermark) from the latest Fetch response of `tp`."""
    lso = consumer.last_stable_offset(tp)
    hw = consumer.highwater(tp)
    return (None if lso is None else int(lso), None if hw is None else int(hw))


def answers(consumer: Any) -> asyncio.Event:
    """An event set each time `consumer` has taken in a Fetch response (records
    stored, marks and errors recorded), whether or not it held records.

    Clear it before draining with ``getmany(timeout_ms=0)``, then wait on it:
    a response taken in between sets it again, so none is missed. The consumer
    must be started (its fetcher exists); the hook wraps that one fetcher's
    response handler (`krabka.kafka.aiokafka_internals.on_fetch_response`).
    """
    event = asyncio.Event()
    on_fetch_response(consumer, event.set)
    return event

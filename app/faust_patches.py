"""Two fixes to faust-streaming 0.15.3's exactly_once mode, applied when the
worker app is built. Both were seen on the local broker (docs/app.md).

1. Recovery high watermarks. Under ``processing_guarantee="exactly_once"``
Faust's table recovery asks the consumer thread for each changelog
partition's high watermark and gets
aiokafka's *cached* last stable offset, which is None until the consumer has
fetched from that partition. A partition a worker has just been assigned (a
standby promoted after another worker died, or any partition after a restart
with a kept data directory) then reports highwater -1, and recovery either
crashes with ``ConsistencyError`` ("persisted offset ... is higher than the
last offset in that topic (highwater) (49 > -1)") or, with the consistency
check off, stops reading the changelog too early. Seen on the local broker
when a worker was SIGKILLed (docs/app.md).

The fix asks the broker instead: aiokafka's ``end_offsets`` sends ListOffsets
with the consumer's isolation level, which for a read_committed consumer is
the last stable offset itself.

2. Commits racing at shutdown. On stop, the consumer's final commit (which
ends each partition's transaction without starting another) can run while
the periodic commit is waiting for the same producer; the second then sends
offsets to a producer that is no longer in a transaction, aiokafka raises
``IllegalOperation("Not in the middle of a transaction")``, the consumer
crashes and the worker exits non-zero. A producer that is not in a
transaction has nothing uncommitted, so its commit is skipped: at worst the
offsets stay where the last commit put them and records are folded again
(the fold ignores records at or below a value's last applied offset).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka

__all__ = ["apply"]

log = logging.getLogger("app.faust_patches")

_APPLIED = "_krabka_patched"


async def _highwaters(self: Any, partitions: Iterable[Any]) -> Mapping[Any, int]:
    consumer = self._ensure_consumer()
    offsets: Mapping[Any, int] = await consumer.end_offsets(list(partitions))
    return offsets


async def _commit_transactions(self: Any, tid_to_offset_map: Mapping[str, Any], group_id: str,
                               start_new_transaction: bool = True) -> None:
    for transactional_id, offsets in tid_to_offset_map.items():
        async with self._trn_locks[transactional_id]:
            producer = self._transaction_producers.get(transactional_id)
            if producer is None:
                log.warning("commit invoked for unknown transaction %s", transactional_id)
                continue
            if not producer._txn_manager.is_in_transaction():
                log.info("transaction %s already ended; nothing to commit", transactional_id)
                continue
            await producer.send_offsets_to_transaction(offsets, group_id)
            await producer.commit_transaction()
            if start_new_transaction:
                await producer.begin_transaction()


def apply() -> None:
    """Patch Faust's aiokafka driver (idempotent)."""
    thread = faust_aiokafka.AIOKafkaConsumerThread
    if getattr(thread, _APPLIED, False):
        return
    thread._highwaters = _highwaters  # type: ignore[method-assign]
    faust_aiokafka.Producer.commit_transactions = _commit_transactions  # type: ignore[method-assign]
    setattr(thread, _APPLIED, True)

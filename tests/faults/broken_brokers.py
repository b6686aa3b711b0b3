"""MemoryBroker variants broken on purpose, one Kafka rule each.

The transport contract suite (tests/kafka/test_transport_contract.py) runs against
one of them when ``TRANSPORT_CONTRACT_BROKER`` names it, so a test can show
that the suite notices each rule missing.
"""

from __future__ import annotations

from krabka.testing import MemoryBroker

__all__ = ["BROKEN_BROKERS"]


class NoFencingBroker(MemoryBroker):
    """InitProducerId mints a new epoch but never fences the previous one."""

    def _current(self, role, token):
        self.expire_transactions()
        return self._ids[role]


class AbortedVisibleBroker(MemoryBroker):
    """An abort commits: read_committed readers see the aborted records."""

    def _finish(self, entry, outcome):
        super()._finish(entry, "CompleteCommit")


class NoStableOffsetBroker(MemoryBroker):
    """Reads run to the high watermark past an open transaction."""

    def partition(self, topic, partition):
        log = super().partition(topic, partition)
        log.last_stable_offset = lambda: log.next_offset
        return log


BROKEN_BROKERS: dict[str, type[MemoryBroker]] = {
    "no-fencing": NoFencingBroker,
    "aborted-visible": AbortedVisibleBroker,
    "no-stable-offset": NoStableOffsetBroker,
}

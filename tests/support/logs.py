"""Builds state-topic partitions record by record, for tests that read as specifications."""

from __future__ import annotations

from krabka import FencingToken
from krabka.format.records import (
    Lease,
    Registration,
    encode_key,
    encode_lease,
    encode_registration,
    lease_key,
    registration_key,
)
from krabka.rules.state import Record


class Log:
    """One partition of ``__coordination_state``, written by a test.

    Offsets start at 0 and step by `gap` (control markers and compacted
    records leave holes in real partitions); each record's Kafka timestamp
    is `ts` when given, else the offset times 1000.
    """

    def __init__(self, gap: int = 1) -> None:
        self.records: list[Record] = []
        self._next = 0
        self._gap = gap

    def _add(self, key: bytes, value: bytes | None, ts: int | None) -> Record:
        offset = self._next
        self._next += self._gap
        record = Record(offset, key, value, ts if ts is not None else offset * 1000)
        self.records.append(record)
        return record

    def register(self, role: str, member: str, *, ts: int | None = None) -> Record:
        value = encode_registration(Registration(member, ts or 0))
        return self._add(encode_key(registration_key(role, member)), value, ts)

    def deregister(self, role: str, member: str, *, ts: int | None = None) -> Record:
        return self._add(encode_key(registration_key(role, member)), None, ts)

    def lease(
        self,
        role: str,
        member: str,
        token: FencingToken,
        *,
        deadline: int,
        granted_at: int = 0,
        ts: int | None = None,
    ) -> Record:
        lease = Lease(member, token.producer_id, token.producer_epoch, granted_at, deadline)
        return self._add(encode_key(lease_key(role)), encode_lease(lease), ts)

    def clear_lease(self, role: str, *, ts: int | None = None, empty: bool = False) -> Record:
        return self._add(encode_key(lease_key(role)), b"" if empty else None, ts)

    def raw(self, key: bytes, value: bytes | None, *, ts: int | None = None) -> Record:
        return self._add(key, value, ts)

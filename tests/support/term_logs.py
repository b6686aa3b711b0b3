"""Builds partitions of ``__coordination_terms`` record by record, and compacts them,
for tests of the term fold and election that read as specifications."""

from __future__ import annotations

from krabka.format.terms import (
    Claim,
    Heartbeat,
    claim_key,
    encode_claim,
    encode_heartbeat,
    encode_term_key,
    heartbeat_key,
)
from krabka.rules.state import Record


class TermLog:
    """One partition of ``__coordination_terms``, written by a test.

    Offsets start at 0 and step by 1; each record's Kafka timestamp is its
    offset times 1000.
    """

    def __init__(self) -> None:
        self.records: list[Record] = []

    def add(self, key: bytes, value: bytes | None) -> Record:
        offset = len(self.records)
        record = Record(offset, key, value, offset * 1000)
        self.records.append(record)
        return record

    def claim(self, role: str, member: str, term: int) -> Record:
        value = encode_claim(Claim(member, term, 0))
        return self.add(encode_term_key(claim_key(role, member, term)), value)

    def heartbeat(self, role: str, member: str, term: int, *, resigned: bool = False) -> Record:
        value = encode_heartbeat(Heartbeat(member, term, 0, resigned))
        return self.add(encode_term_key(heartbeat_key(role)), value)

    def resign(self, role: str, member: str, term: int) -> Record:
        return self.heartbeat(role, member, term, resigned=True)


def compacted(records: list[Record]) -> list[Record]:
    """What log compaction may leave of `records`: the latest record of each key, in place."""
    latest = {record.key: record.offset for record in records}
    return [record for record in records if latest[record.key] == record.offset]

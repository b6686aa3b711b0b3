"""`TermFilter`: how a reader applies term mode's fence (docs/term-mode.md#the-filter).

In term mode the broker accepts a deposed leader's writes; readers discard
them. Every record a term-mode leader writes carries the ``krabka.term``
header (its role and term), and before its first data record the leader
writes a barrier (a record whose header is marked ``barrier``) to every
partition of each declared output topic. The filter keeps, per topic,
partition and role, the highest term it has seen there, barriers included,
and drops every record whose term is lower. Records without the header pass,
unless the filter was told their topic is term-fenced. A header that does not
decode, or more than one, drops the record: it claims to be fenced, and
failing closed never lets a stale record through.

The filter is pure: the caller hands it each record's topic, partition and
headers, in offset order per partition, and delivers what it admits. Its
marks must outlive the process, or a restarted reader would accept a
zombie's records it dropped before: `save` and `restore` turn one
partition's marks into strictly decoded bytes, to travel with that
partition's committed offset (`save_text` gives the text form Kafka's
offset-commit metadata needs) or in a table. The drop counts are this
process's and are not saved. Exported from `krabka`: it is what a
plain consumer or a Faust agent of a term-mode leader's output uses.
"""

from __future__ import annotations

import base64
import binascii
from collections import Counter
from collections.abc import Iterable
from typing import Final, Literal

from krabka.errors import FormatError
from krabka.format.terms import TERM_FORMAT_VERSION, TERM_HEADER, decode_term_header
from krabka.format.wire import Reader, Writer

__all__ = ["Admission", "DropReason", "TermFilter"]

Admission = Literal["pass", "drop", "barrier"]
"""pass: deliver the record; drop: discard it (counted); barrier: a barrier
of a current term, which raised the mark and carries no user data."""

DropReason = Literal["stale", "unstamped", "malformed"]
"""stale: a term lower than the mark; unstamped: no term header on a fenced
topic; malformed: a term header that does not decode, or more than one."""

_MAX_PARTITION: Final = (1 << 31) - 1


def _check_place(topic: str, partition: int) -> None:
    if not topic:
        raise ValueError("topic must not be empty")
    if not 0 <= partition <= _MAX_PARTITION:
        raise ValueError(f"partition must be within 0..{_MAX_PARTITION}, got {partition}")


class TermFilter:
    """Drops the records of superseded terms, per topic, partition and role.

    `fenced_topics` names the topics on which every record must carry a
    term header; elsewhere a record without one passes.
    """

    def __init__(self, fenced_topics: Iterable[str] = ()) -> None:
        self.fenced_topics = frozenset(fenced_topics)
        self._marks: dict[tuple[str, int], dict[str, int]] = {}
        self._dropped: Counter[tuple[str, int, DropReason]] = Counter()

    def admit(
        self, topic: str, partition: int, headers: Iterable[tuple[str, bytes | None]]
    ) -> Admission:
        """The verdict on the next record of `topic`'s `partition`, given its headers.

        `headers` are (name, value) pairs as Kafka clients give them (for a
        mapping, pass its ``items()``). Records must be handed over in offset
        order per partition; the mark rises with every admitted term.
        """
        stamps = [value for name, value in headers if name == TERM_HEADER]
        if not stamps:
            if topic in self.fenced_topics:
                return self._drop(topic, partition, "unstamped")
            return "pass"
        if len(stamps) > 1 or stamps[0] is None:
            return self._drop(topic, partition, "malformed")
        try:
            stamp = decode_term_header(stamps[0])
        except FormatError:
            return self._drop(topic, partition, "malformed")
        marks = self._marks.setdefault((topic, partition), {})
        if stamp.term < marks.get(stamp.role, 0):
            return self._drop(topic, partition, "stale")
        marks[stamp.role] = stamp.term
        return "barrier" if stamp.barrier else "pass"

    def _drop(self, topic: str, partition: int, reason: DropReason) -> Admission:
        self._dropped[(topic, partition, reason)] += 1
        return "drop"

    def mark(self, topic: str, partition: int, role: str) -> int:
        """The highest term of `role` seen on `topic`'s `partition`; 0 if none."""
        return self._marks.get((topic, partition), {}).get(role, 0)

    def seed(self, topic: str, partition: int, role: str, term: int) -> None:
        """Raise `role`'s mark on the partition to `term`, as a reader starting at the end does.

        A mark never falls: seeding below it changes nothing.
        """
        _check_place(topic, partition)
        if not role:
            raise ValueError("role must not be empty")
        if term < 1:
            raise ValueError(f"term must be at least 1, got {term}")
        marks = self._marks.setdefault((topic, partition), {})
        marks[role] = max(marks.get(role, 0), term)

    @property
    def dropped(self) -> dict[DropReason, int]:
        """Records dropped by this process, per reason."""
        totals: Counter[DropReason] = Counter()
        for (_, _, reason), count in self._dropped.items():
            totals[reason] += count
        return dict(totals)

    def dropped_on(self, topic: str, partition: int) -> int:
        """Records dropped by this process on `topic`'s `partition`, for every reason."""
        return sum(n for (t, p, _), n in self._dropped.items() if (t, p) == (topic, partition))

    def save(self, topic: str, partition: int) -> bytes:
        """One partition's marks, as bytes `restore` reads (docs/term-mode.md#saved-marks).

        i16 version=0 | string topic | i64 partition | i16 count
        | count x (string role | i64 term), roles in ascending UTF-8 order.
        """
        _check_place(topic, partition)
        marks = sorted(self._marks.get((topic, partition), {}).items(),
                       key=lambda item: item[0].encode("utf-8"))
        writer = (
            Writer()
            .i16(TERM_FORMAT_VERSION, "version")
            .string(topic, "topic")
            .i64(partition, "partition")
            .i16(len(marks), "count")
        )
        for role, term in marks:
            writer.string(role, "role").i64(term, "term")
        return writer.done()

    def restore(self, topic: str, partition: int, data: bytes) -> None:
        """Raise the partition's marks to those `save` wrote; marks never fall.

        Raises `FormatError` (part ``"term marks"``) for bytes that are not
        exactly one well-formed save of this topic and partition.
        """
        _check_place(topic, partition)
        reader = Reader(data, "term marks")
        reader.version(TERM_FORMAT_VERSION)
        saved_topic = reader.string("topic")
        saved_partition = reader.i64("partition")
        count = reader.i16("count")
        if count < 0:
            raise reader.fail(f"negative count {count}")
        saved: dict[str, int] = {}
        previous: bytes | None = None
        for _ in range(count):
            role = reader.string("role")
            term = reader.i64("term")
            raw = role.encode("utf-8")
            if not role:
                raise reader.fail("empty role")
            if previous is not None and raw <= previous:
                raise reader.fail(f"role {role!r} out of ascending order or repeated")
            if term < 1:
                raise reader.fail(f"term {term} of {role!r}, below 1")
            previous = raw
            saved[role] = term
        reader.end()
        if (saved_topic, saved_partition) != (topic, partition):
            raise reader.fail(
                f"saved for {saved_topic!r} partition {saved_partition},"
                f" not {topic!r} partition {partition}")
        for role, term in saved.items():
            self.seed(topic, partition, role, term)

    def save_text(self, topic: str, partition: int) -> str:
        """`save` as base64 text: Kafka's offset-commit metadata is a string."""
        return base64.b64encode(self.save(topic, partition)).decode("ascii")

    def restore_text(self, topic: str, partition: int, text: str) -> None:
        """`restore` from `save_text`; raises `FormatError` for text that is not its output."""
        try:
            data = base64.b64decode(text.encode("ascii"), validate=True)
        except (UnicodeEncodeError, binascii.Error):
            raise FormatError("term marks", "not base64 text") from None
        self.restore(topic, partition, data)

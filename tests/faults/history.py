"""A Jepsen-style history checker: no guarded write is lost, duplicated or
visible out of tenure order, and none that was fenced is visible.

Every leader, while it leads, performs guarded writes (one Kafka transaction
each) to one partition of an output topic. Each record says who wrote it
under which authority: the member, its token ``(producer_id, producer_epoch)``,
its tenure and a per-writer sequence number. The writer logs the outcome of
every attempt it made:

- ``committed``: the transaction's commit returned;
- ``fenced``: it raised `FencedError`;
- ``unknown``: anything else (the process died, a timeout, a cancellation).

`check_history` then reads the output as a read_committed consumer sees it,
``(offset, value)`` pairs, and checks, with the attempts:

- tenures never decrease in offset order: once a record of tenure t is
  visible, no record of an earlier tenure follows it (``tenure-regression``);
- every write whose commit returned is visible exactly once (``lost``,
  ``duplicate``);
- no write that raised `FencedError` is visible (``fenced-visible``);
- a write of unknown outcome is visible at most once (``duplicate``);
- every visible record is a write some writer attempted, as it attempted it
  (``phantom``), decodes (``malformed``), and one tenure carries one token and
  one token one tenure (``token-conflict``).

In term mode (docs/term-mode.md) the broker refuses nothing: a deposed
leader's writes are in the log, and readers drop them with a `TermFilter`.
`check_term_history` replays the partition, headers included, through a
fresh `TermFilter` (the output topic term-fenced), and checks, with the
attempts, the role's records of the terms topic and the tenures members
believed they held:

- no record of a superseded term passes once a barrier or record of a newer
  term of the role precedes it on the partition (``stale-passed``), and no
  record of the current term is dropped (``valid-dropped``); the checker
  keeps its own mark, so a broken filter is caught;
- every record carries one well-formed term header (``unstamped``), the
  term its value says it was written under (``stamp-mismatch``), by the
  member whose claim won that term, in that claim's tenure
  (``not-the-holder``);
- at most one tenure holds each term, and it is the fold's winner
  (``two-holders``); in claim order, terms never go back (``term-regression``);
- every tenure of a superseded term that was still running when the history
  ended has ended (``zombie-not-stopped``): a zombie must notice;
- as in epoch mode: a committed write is in the log exactly once (``lost``,
  ``duplicate``), and every record is a write someone attempted as written
  (``phantom``) and decodes (``malformed``). A committed write that readers
  drop is a zombie's, accepted by the broker (counted, not a violation), and
  a write that raised `FencedError` may be in the log and pass: the tenure
  ended while the broker had it, before the newer term's barrier (counted
  as ``fenced_visible``).

Three more checks judge the runner around the writes, in both modes
(`check_tenure_owners`, `check_function_copies`, `check_lease_stories`):

- no tenure outlives the runner that owns it by more than one renew
  interval of its process's running time, and a tenure no runner was told
  of (the campaign that took it failed) renews at most within that interval
  of its first lease (``ownerless-tenure``);
- at no instant do two copies of a role's function run: within one process
  never, across members not once a copy outran its tenure's end by the
  runner's stop bound (``two-copies``);
- every lease a tenure committed is in the role's leadership-change history
  as the library derives it from the state topic (`krabka.rules.fold`,
  `krabka.observe.events`): its first lease as the ``elected`` event at its
  tenure's offset, then each renewal, in offset order (``story-missing``,
  ``story-order``).

It works on plain data, so the simulation, the benchmarks and the real-process
fault tests share it: a writer in another process keeps an attempt journal
(JSON lines, `HistoryWriter(journal=...)`), which `attempts_from_journal`
turns back into attempts; an attempt that started but never logged its end
(the process was killed) is ``unknown``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import IO, Literal

from krabka import FencedError, FormatError, Leadership, TermFilter, TermToken
from krabka.clock import Clock, SystemClock
from krabka.format.records import Lease
from krabka.format.terms import TERM_HEADER, TermStamp, decode_barrier, decode_term_header
from krabka.format.token import NO_EPOCH
from krabka.observe.events import change_event
from krabka.rules.changes import Elected, Renewed
from krabka.rules.fold import RoleFold
from krabka.rules.state import Record
from krabka.term.fold import TermView, build_term_view

__all__ = [
    "LIFECYCLE_VIOLATION_KINDS",
    "TERM_VIOLATION_KINDS",
    "VIOLATION_KINDS",
    "Attempt",
    "FunctionRun",
    "HistoryRecord",
    "HistoryReport",
    "HistoryWriter",
    "LeaseStory",
    "Outcome",
    "OutputRecord",
    "TenureEnd",
    "TenureLife",
    "TermTenure",
    "Violation",
    "attempts_from_journal",
    "check_function_copies",
    "check_history",
    "check_lease_stories",
    "check_tenure_owners",
    "check_term_history",
    "decode_record",
    "encode_record",
]

Outcome = Literal["committed", "fenced", "unknown"]
OUTCOMES: tuple[Outcome, ...] = ("committed", "fenced", "unknown")

VIOLATION_KINDS = (
    "tenure-regression",
    "lost",
    "duplicate",
    "fenced-visible",
    "phantom",
    "malformed",
    "token-conflict",
)

TERM_VIOLATION_KINDS = (
    "stale-passed",
    "valid-dropped",
    "unstamped",
    "stamp-mismatch",
    "not-the-holder",
    "two-holders",
    "term-regression",
    "zombie-not-stopped",
    "lost",
    "duplicate",
    "phantom",
    "malformed",
)

LIFECYCLE_VIOLATION_KINDS = (
    "ownerless-tenure",
    "two-copies",
    "story-missing",
    "story-order",
)

FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True)
class HistoryRecord:
    """The value of one guarded write: who wrote it, under which authority.

    `writer` names one writing process for one role (e.g. ``"m1.2/billing"``:
    member m1, its second incarnation); `seq` counts that writer's attempts
    from 1. ``(writer, seq)`` identifies a write. In term mode the token is
    `term` and the producer fields are -1; in epoch mode `term` is 0.
    """

    writer: str
    seq: int
    member: str
    role: str
    producer_id: int
    producer_epoch: int
    tenure: int
    term: int = 0

    @property
    def write_id(self) -> tuple[str, int]:
        """The write's identity: its writer and sequence number."""
        return (self.writer, self.seq)

    @property
    def token(self) -> tuple[int, int]:
        """The token the write was made under, as ``(producer_id, producer_epoch)``."""
        return (self.producer_id, self.producer_epoch)


def encode_record(record: HistoryRecord) -> bytes:
    """The record as compact JSON bytes with a format version.

    ``term`` is written only in term mode, so epoch-mode records keep their bytes.
    """
    fields = {"v": FORMAT_VERSION, "writer": record.writer, "seq": record.seq,
              "member": record.member, "role": record.role, "producer_id": record.producer_id,
              "producer_epoch": record.producer_epoch, "tenure": record.tenure}
    if record.term:
        fields["term"] = record.term
    return json.dumps(fields, separators=(",", ":")).encode()


def decode_record(value: bytes | None) -> HistoryRecord:
    """Parse `encode_record`'s bytes; `ValueError` for anything else."""
    if value is None:
        raise ValueError("a tombstone is not a history record")
    try:
        data = json.loads(value)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(data, dict) or data.pop("v", None) != FORMAT_VERSION:
        raise ValueError(f"not a version {FORMAT_VERSION} history record")
    try:
        record = HistoryRecord(**data)
    except TypeError as exc:
        raise ValueError(f"wrong fields: {exc}") from None
    for name in ("writer", "member", "role"):
        if not isinstance(getattr(record, name), str):
            raise ValueError(f"{name} is not a string")
    for name in ("seq", "producer_id", "producer_epoch", "tenure", "term"):
        value_ = getattr(record, name)
        if not isinstance(value_, int) or isinstance(value_, bool):
            raise ValueError(f"{name} is not an integer")
    return record


@dataclass(frozen=True, slots=True)
class Attempt:
    """One guarded write as its writer saw it: the record and the outcome.

    `started_ms` and `ended_ms` are on the writer's clock; `detail` is the
    error's text for ``fenced`` and ``unknown``.
    """

    record: HistoryRecord
    outcome: Outcome
    started_ms: int = 0
    ended_ms: int = 0
    detail: str = ""

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"an outcome is one of {OUTCOMES}, not {self.outcome!r}")

    @property
    def write_id(self) -> tuple[str, int]:
        """The write's identity: its writer and sequence number."""
        return self.record.write_id

    def to_json(self) -> str:
        """One journal line for this attempt's outcome."""
        return json.dumps({"event": "end", "record": asdict(self.record),
                           "outcome": self.outcome, "started_ms": self.started_ms,
                           "ended_ms": self.ended_ms, "detail": self.detail},
                          sort_keys=True)


def attempts_from_journal(lines: Iterable[str]) -> list[Attempt]:
    """Attempts from a writer's JSON-lines journal, in the order they started.

    A ``start`` line without a matching ``end`` line (the writer died during
    the attempt) becomes an ``unknown`` attempt.
    """
    started: dict[tuple[str, int], Attempt] = {}
    for line in lines:
        if not line.strip():
            continue
        entry = json.loads(line)
        record = HistoryRecord(**entry["record"])
        if entry["event"] == "start":
            started[record.write_id] = Attempt(record, "unknown", entry["started_ms"],
                                               entry["started_ms"], "no outcome logged")
        else:
            started[record.write_id] = Attempt(record, entry["outcome"], entry["started_ms"],
                                               entry["ended_ms"], entry["detail"])
    return list(started.values())


class HistoryWriter:
    """Makes guarded writes of history records and logs every attempt's outcome.

    One writer per (process, role): `writer` must be unique across the whole
    history (put the member and an incarnation number in it). Attempts are
    appended to `attempts`, and, with `journal`, written as JSON lines (a
    ``start`` line before the write, an ``end`` line after), so a process
    killed in the middle of a write leaves an ``unknown`` attempt behind.
    `before_commit`, if given, runs inside each transaction after the send
    (a fault test freezes the process there).
    """

    def __init__(
        self,
        writer: str,
        topic: str,
        partition: int,
        *,
        clock: Clock | None = None,
        journal: IO[str] | None = None,
        before_commit: Callable[[], None] | None = None,
    ) -> None:
        self.writer = writer
        self.before_commit = before_commit
        self.topic = topic
        self.partition = partition
        self.attempts: list[Attempt] = []
        self._clock = clock or SystemClock()
        self._journal = journal
        self._seq = 0

    async def write(self, leadership: Leadership) -> Attempt:
        """One guarded write under `leadership`; returns the attempt.

        `FencedError` is an outcome, not an error: it is logged and returned.
        Anything else (cancellation included) is logged as ``unknown`` and
        raised.
        """
        self._seq += 1
        token = leadership.token
        if isinstance(token, TermToken):
            record = HistoryRecord(self.writer, self._seq, leadership.member, leadership.role,
                                   NO_EPOCH.producer_id, NO_EPOCH.producer_epoch,
                                   leadership.tenure, token.term)
        else:
            record = HistoryRecord(self.writer, self._seq, leadership.member, leadership.role,
                                   token.producer_id, token.producer_epoch, leadership.tenure)
        started = self._clock.now_ms()
        self._log_start(record, started)
        outcome: Outcome = "unknown"
        detail = ""
        try:
            async with leadership.transaction() as txn:
                await txn.send(self.topic, encode_record(record),
                               key=self.writer.encode(), partition=self.partition)
                if self.before_commit is not None:
                    self.before_commit()
            outcome = "committed"
        except FencedError as exc:
            outcome, detail = "fenced", str(exc)
        except BaseException as exc:
            detail = repr(exc)
            raise
        finally:
            attempt = Attempt(record, outcome, started, self._clock.now_ms(), detail)
            self.attempts.append(attempt)
            if self._journal is not None:
                self._journal.write(attempt.to_json() + "\n")
                self._journal.flush()
        return attempt

    def _log_start(self, record: HistoryRecord, started: int) -> None:
        if self._journal is not None:
            self._journal.write(json.dumps({"event": "start", "record": asdict(record),
                                            "started_ms": started}, sort_keys=True) + "\n")
            self._journal.flush()


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule: its kind (one of `VIOLATION_KINDS`), where, and what."""

    kind: str
    detail: str
    offset: int | None = None

    def __str__(self) -> str:
        where = "" if self.offset is None else f" at offset {self.offset}"
        return f"{self.kind}{where}: {self.detail}"


@dataclass(slots=True)
class HistoryReport:
    """The checker's findings: counts for a table, and every violation.

    `lost` must be 0 and `violations` empty for a correct system; an unknown
    outcome may be visible (`unknown_visible`) or not. In term mode
    (`fencing` ``"term"``) `visible` counts what a `TermFilter` delivers,
    `dropped` the role's data records it dropped (`dropped_committed` of them
    committed: zombie writes the broker accepted), `fenced_visible` the
    writes that raised `FencedError` and pass, and `barriers` the role's
    barriers on the partition.
    """

    fencing: str = "epoch"

    attempted: int = 0
    committed: int = 0
    fenced: int = 0
    unknown: int = 0
    unknown_visible: int = 0
    visible: int = 0
    tenures: int = 0
    lost: int = 0
    duplicates: int = 0
    dropped: int = 0
    dropped_committed: int = 0
    fenced_visible: int = 0
    barriers: int = 0
    violations: list[Violation] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no rule was broken."""
        return not self.violations

    def kinds(self) -> set[str]:
        """The kinds of violation found."""
        return {violation.kind for violation in self.violations}

    def summary(self) -> str:
        """One line of counts."""
        line = (f"attempted={self.attempted} committed={self.committed} fenced={self.fenced} "
                f"unknown={self.unknown} (visible {self.unknown_visible}) "
                f"visible={self.visible} tenures={self.tenures} lost={self.lost} "
                f"duplicates={self.duplicates} violations={len(self.violations)}")
        if self.fencing == "term":
            line += (f" dropped={self.dropped} (committed {self.dropped_committed}) "
                     f"fenced_visible={self.fenced_visible} barriers={self.barriers}")
        return line

    def __str__(self) -> str:
        lines = [self.summary()]
        lines += [f"  {violation}" for violation in self.violations[:20]]
        if len(self.violations) > 20:
            lines.append(f"  ... and {len(self.violations) - 20} more")
        return "\n".join(lines)


def check_history(
    output: Iterable[tuple[int, bytes | None]], attempts: Iterable[Attempt]
) -> HistoryReport:
    """Check what a read_committed consumer saw against what writers attempted.

    `output` is the partition's ``(offset, value)`` pairs (any order; they are
    sorted by offset); `attempts` every attempt of every writer of the role.
    Two attempts with one ``(writer, seq)`` are a broken harness: `ValueError`.
    """
    report = HistoryReport()
    by_id = _tally(report, attempts)
    offsets_of: dict[tuple[str, int], list[int]] = {}
    latest: tuple[int, int] | None = None  # (tenure, offset of its first record)
    token_of: dict[int, tuple[int, int]] = {}
    tenure_of: dict[tuple[int, int], int] = {}
    for offset, value in sorted(output, key=lambda pair: pair[0]):
        try:
            record = decode_record(value)
        except ValueError as exc:
            report.violations.append(Violation("malformed", str(exc), offset))
            continue
        report.visible += 1
        offsets_of.setdefault(record.write_id, []).append(offset)
        if latest is not None and record.tenure < latest[0]:
            report.violations.append(Violation(
                "tenure-regression",
                f"write {record.write_id} of tenure {record.tenure} follows tenure "
                f"{latest[0]}, first visible at offset {latest[1]}",
                offset,
            ))
        elif latest is None or record.tenure > latest[0]:
            latest = (record.tenure, offset)
        _check_token(report, record, offset, token_of, tenure_of)
        attempted = by_id.get(record.write_id)
        if attempted is None or attempted.record != record:
            report.violations.append(Violation(
                "phantom",
                f"write {record.write_id} is visible but was never attempted as {record}",
                offset,
            ))
    report.tenures = len(token_of)

    _check_duplicates(report, offsets_of)
    for write_id, attempt in by_id.items():
        seen = offsets_of.get(write_id, [])
        if attempt.outcome == "committed" and not seen:
            report.lost += 1
            report.violations.append(Violation(
                "lost", f"write {write_id} committed but is not visible"))
        elif attempt.outcome == "fenced" and seen:
            report.violations.append(Violation(
                "fenced-visible",
                f"write {write_id} raised FencedError ({attempt.detail}) but is visible",
                seen[0],
            ))
        elif attempt.outcome == "unknown" and seen:
            report.unknown_visible += 1
    return report


def _tally(report: HistoryReport, attempts: Iterable[Attempt]) -> dict[tuple[str, int], Attempt]:
    """Count the attempts by outcome; index them by write id (one attempt per write)."""
    by_id: dict[tuple[str, int], Attempt] = {}
    for attempt in attempts:
        if attempt.write_id in by_id:
            raise ValueError(f"two attempts are logged as write {attempt.write_id}")
        by_id[attempt.write_id] = attempt
        report.attempted += 1
        setattr(report, attempt.outcome, getattr(report, attempt.outcome) + 1)
    return by_id


def _check_duplicates(report: HistoryReport, offsets_of: dict[tuple[str, int], list[int]]) -> None:
    for write_id, offsets in offsets_of.items():
        if len(offsets) > 1:
            report.duplicates += 1
            report.violations.append(Violation(
                "duplicate", f"write {write_id} is visible {len(offsets)} times, at {offsets}",
                offsets[1],
            ))


def _check_token(
    report: HistoryReport,
    record: HistoryRecord,
    offset: int,
    token_of: dict[int, tuple[int, int]],
    tenure_of: dict[tuple[int, int], int],
) -> None:
    token = token_of.setdefault(record.tenure, record.token)
    tenure = tenure_of.setdefault(record.token, record.tenure)
    if token != record.token:
        report.violations.append(Violation(
            "token-conflict",
            f"tenure {record.tenure} carries token {record.token} and token {token}",
            offset,
        ))
    elif tenure != record.tenure:
        report.violations.append(Violation(
            "token-conflict",
            f"token {record.token} carries tenure {record.tenure} and tenure {tenure}",
            offset,
        ))


# Term mode.


@dataclass(frozen=True, slots=True)
class OutputRecord:
    """One record of an output partition as a plain consumer reads it, headers included."""

    offset: int
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


TenureEnd = Literal["fenced", "resigned", "crashed", "paused", "running", "error"]
"""How a term-mode tenure stood when the history ended: ended by `FencedError`
(a higher claim or its fence deadline), resigned, its process dead, its
process stopped (a zombie that cannot act), still leading in a running
process, or ended by another error."""


@dataclass(frozen=True, slots=True)
class TermTenure:
    """A tenure a member believed it held: its term and its winning claim's offset."""

    member: str
    term: int
    tenure: int
    end: TenureEnd
    detail: str = ""


def _term_stamp(headers: Iterable[tuple[str, bytes | None]]) -> TermStamp | str:
    """The record's one term header, or why it has none that counts."""
    stamps = [value for name, value in headers if name == TERM_HEADER]
    if len(stamps) != 1:
        return f"{len(stamps)} term headers"
    if stamps[0] is None:
        return "a null term header"
    try:
        return decode_term_header(stamps[0])
    except FormatError as exc:
        return str(exc)


def check_term_history(
    output: Iterable[OutputRecord],
    attempts: Iterable[Attempt],
    *,
    role: str,
    topic: str,
    partition: int,
    terms: Iterable[Record],
    tenures: Iterable[TermTenure] = (),
    reader: TermFilter | None = None,
) -> HistoryReport:
    """Check a term-mode role's output partition as a filtering reader sees it.

    `output` is every record of `topic`'s `partition` (any order; sorted by
    offset), other roles' barriers included; `attempts` every attempt of the
    role's writers; `terms` the role's partition of the terms topic (claims
    decide who won each term); `tenures` every tenure members believed they
    held. `reader` replaces the fresh ``TermFilter(fenced_topics=[topic])``
    the partition is replayed through (a test plants a broken one).
    """
    report = HistoryReport(fencing="term")
    by_id = _tally(report, attempts)
    won = build_term_view(role, terms)
    reader = reader if reader is not None else TermFilter(fenced_topics=[topic])
    highest = 0  # the role's highest term stamped so far on the partition
    in_log: dict[tuple[str, int], list[int]] = {}
    delivered: set[tuple[str, int]] = set()
    written_terms: set[int] = set()
    for record in sorted(output, key=lambda r: r.offset):
        offset = record.offset
        verdict = reader.admit(topic, partition, record.headers)
        stamp = _term_stamp(record.headers)
        if isinstance(stamp, str):
            report.violations.append(Violation(
                "unstamped", f"no one valid term header ({stamp}); the reader said {verdict}",
                offset))
            continue
        if stamp.role != role:
            continue  # another role's barrier: every leader barriers every partition
        superseded = stamp.term < highest
        if superseded and verdict != "drop":
            report.violations.append(Violation(
                "stale-passed",
                f"a record of term {stamp.term} passed after one of term {highest}", offset))
        elif not superseded and verdict == "drop":
            report.violations.append(Violation(
                "valid-dropped", f"a record of term {stamp.term}, the highest yet, was dropped",
                offset))
        highest = max(highest, stamp.term)
        winner = won.winner(stamp.term)
        if stamp.barrier:
            report.barriers += 1
            _check_barrier(report, record, stamp, winner.member if winner else None)
            continue
        try:
            written = decode_record(record.value)
        except ValueError as exc:
            report.violations.append(Violation("malformed", str(exc), offset))
            continue
        in_log.setdefault(written.write_id, []).append(offset)
        written_terms.add(stamp.term)
        if written.term != stamp.term:
            report.violations.append(Violation(
                "stamp-mismatch", f"write {written.write_id} of term {written.term} is "
                f"stamped with term {stamp.term}", offset))
        if winner is None or (written.member, written.tenure) != (winner.member, winner.offset):
            holder = ("no claim won it" if winner is None
                      else f"{winner.member}'s claim at offset {winner.offset} won it")
            report.violations.append(Violation(
                "not-the-holder", f"write {written.write_id} of {written.member} (tenure "
                f"{written.tenure}) is stamped with term {stamp.term}, but {holder}", offset))
        attempted = by_id.get(written.write_id)
        if attempted is None or attempted.record != written:
            report.violations.append(Violation(
                "phantom", f"write {written.write_id} is in the log but was never attempted "
                f"as {written}", offset))
        if verdict == "pass":
            report.visible += 1
            delivered.add(written.write_id)
        else:
            report.dropped += 1
    report.tenures = len(written_terms)
    _check_duplicates(report, in_log)
    for write_id, attempt in by_id.items():
        if attempt.outcome == "committed" and write_id not in in_log:
            report.lost += 1
            report.violations.append(Violation(
                "lost", f"write {write_id} committed but is not in the log"))
        elif attempt.outcome == "committed" and write_id not in delivered:
            report.dropped_committed += 1
        elif attempt.outcome == "fenced" and write_id in delivered:
            report.fenced_visible += 1
        elif attempt.outcome == "unknown" and write_id in delivered:
            report.unknown_visible += 1
    _check_tenures(report, list(tenures), won)
    return report


def _check_barrier(report: HistoryReport, record: OutputRecord, stamp: TermStamp,
                   holder: str | None) -> None:
    try:
        barrier = decode_barrier(record.value or b"")
    except FormatError as exc:
        report.violations.append(Violation("malformed", f"a barrier: {exc}", record.offset))
        return
    if barrier.term != stamp.term:
        report.violations.append(Violation(
            "stamp-mismatch", f"a barrier of term {barrier.term} is stamped with term "
            f"{stamp.term}", record.offset))
    if barrier.member != holder:
        report.violations.append(Violation(
            "not-the-holder", f"a barrier of term {stamp.term} by {barrier.member}, but "
            f"{holder or 'no member'} won that term", record.offset))


def _check_tenures(report: HistoryReport, tenures: list[TermTenure], won: TermView) -> None:
    """One holder per term, the fold's winner; terms grow in claim order; zombies stop."""
    held: dict[int, set[tuple[str, int]]] = {}
    for tenure in tenures:
        held.setdefault(tenure.term, set()).add((tenure.member, tenure.tenure))
        winner = won.winner(tenure.term)
        if winner is None or (tenure.member, tenure.tenure) != (winner.member, winner.offset):
            holder = ("no claim won it" if winner is None
                      else f"{winner.member}'s claim at offset {winner.offset} won it")
            report.violations.append(Violation(
                "two-holders", f"{tenure.member} (tenure {tenure.tenure}) believed it held term "
                f"{tenure.term}, but {holder}"))
        if tenure.term < won.term and tenure.end == "running":
            report.violations.append(Violation(
                "zombie-not-stopped", f"{tenure.member}'s tenure of term {tenure.term} still "
                f"ran at the end, although term {won.term} was claimed"))
    for term, holders in sorted(held.items()):
        if len(holders) > 1:
            report.violations.append(Violation(
                "two-holders", f"term {term} was held by {sorted(holders)}"))
    ordered = sorted({(t.tenure, t.term) for t in tenures})
    for (_, before), (offset, after) in itertools.pairwise(ordered):
        if after < before:  # an equal term is two holders of it, reported above
            report.violations.append(Violation(
                "term-regression", f"the tenure claimed at offset {offset} holds term {after}, "
                f"below the earlier tenure's term {before}"))


# The runner around the writes: owners, copies and the events' story.


@dataclass(frozen=True, slots=True)
class TenureLife:
    """One tenure and its owner, its times in its process's running milliseconds.

    Running time stops while the process is paused: a stopped process can
    neither renew nor end a tenure. `owner` names the runner that was told
    it leads (``"m1.2/billing"``), ``""`` when none was (the campaign that
    took it failed, or the runner that got it was cancelled before it could
    tell). `began_ms`: its first record committed; `handed_ms`: the campaign
    returned it to its runner (None if it never did); `owner_ended_ms`:
    its runner's task ended (None while it ran on); `ended_ms`: the tenure
    stopped leading (its resignation began) or ended (None if it had not
    when the history ended, at `history_end_ms`);
    `renewals_ms`: each later lease record of it committed.
    """

    role: str
    member: str
    tenure: int
    token: str
    owner: str
    began_ms: int
    owner_ended_ms: int | None
    ended_ms: int | None
    history_end_ms: int
    renewals_ms: tuple[int, ...] = ()
    handed_ms: int | None = None


def check_tenure_owners(lives: Iterable[TenureLife], renew_ms: int) -> list[Violation]:
    """Tenures that lived, or renewed, more than `renew_ms` past their owner (``ownerless-tenure``).

    An owned tenure's owner ends when its runner's task ends. A tenure no
    runner was told of is owned by the campaign that took it until that
    campaign returned it (a runner cancelled at that instant hands it back),
    or, if it never did, until its first lease.
    """
    found = []
    for life in lives:
        unowned_from = life.began_ms if life.handed_ms is None else life.handed_ms
        ended = unowned_from if not life.owner else life.owner_ended_ms
        if ended is None:
            continue
        whose = (f"{life.member}'s tenure {life.tenure} ({life.token}) of {life.role}")
        after = ("after its runner " + life.owner + " ended" if life.owner
                 else "after its campaign ended, no runner told of it")
        late = [at for at in life.renewals_ms if at > ended + renew_ms]
        if late:
            found.append(Violation("ownerless-tenure", f"{whose} committed {len(late)} "
                                   f"lease record(s), the first {late[0] - ended} ms {after}",
                                   life.tenure))
            continue
        end = life.history_end_ms if life.ended_ms is None else life.ended_ms
        if life.owner and end > ended + renew_ms:
            still = "still ran at the end" if life.ended_ms is None else "ended"
            found.append(Violation("ownerless-tenure", f"{whose} {still} {end - ended} ms "
                                   f"{after}", life.tenure))
    return found


@dataclass(frozen=True, slots=True)
class FunctionRun:
    """One copy of a role's function, in cluster milliseconds.

    `process` names the process that ran it (``"m1.2"``); `ended_ms` is None
    for a copy still running when the history ended. `tenure_ended_ms` is
    when its tenure ended (None if it had not), `paused_ms` when its process
    first stopped (a pause or a crash) after the copy started (None if it
    did not): from then on the copy is a zombie the broker fences, not one
    the runner must stop. `ignored_cancellation`: the copy went on after it
    was cancelled.
    """

    role: str
    process: str
    tenure: int
    started_ms: int
    ended_ms: int | None
    tenure_ended_ms: int | None = None
    paused_ms: int | None = None
    ignored_cancellation: bool = False


def check_function_copies(runs: Iterable[FunctionRun], grace_ms: int) -> list[Violation]:
    """Two copies of a role's function at one instant (``two-copies``).

    Within one process never. Across members, a copy counts once it ran
    `grace_ms` (the runner's bound on stopping a function) past the end of
    its tenure in a process that did not stop meanwhile: before that it is
    the fencing's business (a copy that has not noticed yet, its I/O being
    aborted), after it a copy nobody stopped. A copy that ignored its
    cancellation is left running once the runner's bound has passed, its
    writes fenced by the resignation (`LeaderRunner`): across members it
    does not count.
    """
    found = []
    by_role: dict[str, list[FunctionRun]] = {}
    for run in runs:
        by_role.setdefault(run.role, []).append(run)
    for role, copies in by_role.items():
        copies.sort(key=lambda run: (run.started_ms, run.process, run.tenure))
        for index, later in enumerate(copies):
            for earlier in copies[:index]:
                at = later.started_ms
                if earlier.ended_ms is not None and earlier.ended_ms <= at:
                    continue
                if earlier.process != later.process:
                    gone = earlier.tenure_ended_ms
                    if earlier.ignored_cancellation or gone is None or at < gone + grace_ms or (
                            earlier.paused_ms is not None and earlier.paused_ms <= at):
                        continue
                where = ("in one process" if earlier.process == later.process
                         else f"{at - (earlier.tenure_ended_ms or 0)} ms after the first's "
                         "tenure ended")
                found.append(Violation(
                    "two-copies", f"{role}: {later.process}'s copy (tenure {later.tenure}) "
                    f"started at {at} ms while {earlier.process}'s copy (tenure "
                    f"{earlier.tenure}, from {earlier.started_ms} ms) still ran, {where}"))
    return found


@dataclass(frozen=True, slots=True)
class LeaseStory:
    """What one tenure knows it committed: its first lease (at offset `tenure`)
    and then each renewal it was told of, in order."""

    role: str
    member: str
    tenure: int
    token: tuple[int, int]
    leases: tuple[Lease, ...]


def check_lease_stories(role: str, partition: int, records: Iterable[Record],
                        stories: Iterable[LeaseStory]) -> list[Violation]:
    """Each tenure's leases in the events the library derives from `records`.

    `records` are the role's partition of the state topic before any
    compaction (other roles' records included), folded by a `RoleFold`; each
    change becomes an event as the worker publishes them (`change_event`;
    a renewal is no event, so its story is the fold's `Renewed` change). A
    story must read: the ``elected`` event at the tenure's offset, with its
    member, token, tenure and first lease, then each renewal's lease, at
    growing offsets (``story-missing``, ``story-order``).
    """
    fold = RoleFold(role)
    elected: dict[int, tuple[Lease, str | None, object, int | None]] = {}
    renewed: dict[Lease, list[int]] = {}
    for record in sorted(records, key=lambda r: r.offset):
        change = fold.apply(record)
        event = change_event(fold.state, partition, change)
        if isinstance(change, Elected) and event is not None and event.kind == "elected":
            elected[record.offset] = (change.lease, event.member, event.token, event.tenure)
        elif isinstance(change, Renewed):
            renewed.setdefault(change.lease, []).append(record.offset)
    found = []
    for story in stories:
        whose = f"{role}: {story.member}'s tenure {story.tenure} ({story.token})"
        seen = elected.get(story.tenure)
        first = story.leases[0] if story.leases else None
        token = None if seen is None else seen[2]
        token_pair = (getattr(token, "producer_id", None), getattr(token, "producer_epoch", None))
        if seen is None or (seen[0], seen[1], token_pair, seen[3]) != (
                first, story.member, story.token, story.tenure):
            found.append(Violation("story-missing", f"{whose}: no elected event at its first "
                                   f"lease's offset for {first} (events: {seen})", story.tenure))
            continue
        previous = story.tenure
        for number, lease in enumerate(story.leases[1:], start=1):
            offsets = [o for o in renewed.get(lease, []) if o > story.tenure]
            if not offsets:
                found.append(Violation("story-missing", f"{whose}: renewal {number} ({lease}) "
                                       "committed but is no renewal in the events"))
                break
            later = [o for o in offsets if o > previous]
            if not later:
                found.append(Violation("story-order", f"{whose}: renewal {number} is at "
                                       f"offset {offsets[0]}, before renewal {number - 1}'s "
                                       f"{previous}", offsets[0]))
                break
            previous = later[0]
    return found

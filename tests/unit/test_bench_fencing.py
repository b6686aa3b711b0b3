"""The bench's fencing dimension: which systems the election figures run, how term
mode's zombie records are judged by a reader, and the table's term column."""

from __future__ import annotations

from pathlib import Path

from bench.context import Bench, OutputRecord, Timing, fencing_of
from bench.figures import _filter_zombie
from bench.stats import Result, table
from krabka.format.terms import TERM_HEADER, TermStamp, encode_term_header

TOPIC = "bench-zombie"
ROLE = "bench.zombie.r.0"


def stamped(offset: int, term: int, member: str | None, *, barrier: bool = False,
            role: str = ROLE) -> OutputRecord:
    header = encode_term_header(TermStamp(role, term, barrier=barrier))
    value = None if member is None else {"member": member, "seq": offset}
    return OutputRecord(offset, 1_000 + offset, ((TERM_HEADER, header),), value)


def test_each_fencing_mode_is_a_system_of_its_own_before_the_peers(tmp_path: Path) -> None:
    bench = Bench(tmp_path, 1, True, Timing(), systems=["krabka", "etcd", "zookeeper"])
    bench.fencings = ["epoch", "term"]
    assert bench.contenders() == ["krabka", "krabka-term", "etcd", "zookeeper"]
    bench.fencings = ["term"]
    assert bench.contenders() == ["krabka-term", "etcd", "zookeeper"]
    bench.systems = ["etcd"]
    assert bench.contenders() == ["etcd"]
    assert [fencing_of(s) for s in ("krabka", "krabka-term", "etcd")] == ["epoch", "term", None]


def test_the_zombie_records_after_the_successors_barrier_are_dropped_and_counted() -> None:
    records = [
        stamped(0, 1, None, barrier=True),
        stamped(1, 1, "a0"),
        stamped(2, 1, "a0"),   # the zombie, before the successor's barrier: valid
        stamped(3, 2, None, barrier=True),
        stamped(4, 1, "a0"),   # the zombie after it: dropped
        stamped(5, 2, "b0"),
        stamped(6, 1, "a0"),   # dropped
        OutputRecord(7, 1_007, (), {"member": "a0", "seq": 7}),  # unstamped: dropped
    ]
    verdicts = _filter_zombie(records, TOPIC, ROLE, "a0", successor_term=2)
    assert (verdicts.dropped, verdicts.passed_after_barrier) == (3, 0)


def test_a_zombie_record_that_passes_after_the_barrier_is_counted() -> None:
    # Another role's barrier of a higher term says nothing about this role's marks.
    records = [
        stamped(0, 1, None, barrier=True),
        stamped(1, 2, None, barrier=True, role="another.role"),
        stamped(2, 1, "a0"),
        stamped(3, 2, None, barrier=True),
        stamped(4, 2, "a0"),   # stamped with the new term: a reader cannot refuse it
    ]
    verdicts = _filter_zombie(records, TOPIC, ROLE, "a0", successor_term=2)
    assert (verdicts.dropped, verdicts.passed_after_barrier) == (0, 1)


def test_the_table_gives_term_modes_p50_over_each_other_rows() -> None:
    def row(system: str, p50: float) -> Result:
        return Result("crash-failover", system, "ms", [p50], {})

    text = table([row("krabka", 2000.0), row("krabka-term", 3000.0), row("etcd", 1500.0)],
                 markdown=True)
    lines = text.splitlines()
    assert "term/row p50" in lines[0]
    assert lines[2].split(" | ")[9:11] == ["-", "1.50"]     # epoch: term/epoch
    assert lines[3].split(" | ")[9:11] == ["0.67", "-"]     # term: epoch/term
    assert lines[4].split(" | ")[9:11] == ["1.33", "2.00"]  # etcd
    without = table([row("krabka", 2000.0), row("etcd", 1500.0)], markdown=True)
    assert "term/row p50" not in without

"""The fault-run report: what it counts from the attempts, and its table."""

from __future__ import annotations

from dataclasses import asdict

from tests.faults.fault_report import table
from tests.faults.fault_run import fault_report, refused_by_broker
from tests.faults.history import Attempt, HistoryRecord, check_history, encode_record

BROKER = ("billing: the commit was fenced: 7:0 is superseded "
          "(ProducerFenced('There is a newer producer'))")
LIBRARY = ("billing: the tenure of 7:0 is over (billing: a lease write was fenced: "
           "7:0 is superseded (ProducerFenced('x')))")
DEADLINE = "billing: the tenure of 7:0 ended: the lease could not be renewed"


def attempt(member: str, seq: int, tenure: int, outcome: str, ended_ms: int,
            detail: str = "") -> Attempt:
    record = HistoryRecord(f"{member}.1/billing", seq, member, "billing", 7, tenure, tenure)
    return Attempt(record, outcome, ended_ms - 5, ended_ms, detail)  # type: ignore[arg-type]


def test_a_fence_is_the_brokers_only_when_the_write_itself_was_refused():
    assert refused_by_broker(BROKER)
    assert not refused_by_broker(LIBRARY)
    assert not refused_by_broker(DEADLINE)


def test_the_report_counts_refusals_the_longest_gap_and_the_failover():
    attempts = [
        attempt("a", 1, 1, "committed", 1_000),
        attempt("a", 2, 1, "committed", 1_100),
        attempt("a", 3, 1, "fenced", 4_000, BROKER),
        attempt("a", 4, 1, "fenced", 4_001, LIBRARY),
        attempt("b", 1, 9, "committed", 3_600),
        attempt("b", 2, 9, "committed", 3_700),
    ]
    output = [(n, encode_record(a.record)) for n, a in enumerate(attempts)
              if a.outcome == "committed"]
    fenced_events = [{"event": "fenced", "error": BROKER}, {"event": "fenced", "error": DEADLINE}]
    report = fault_report("zombie", check_history(output, attempts), attempts, fenced_events,
                          fault_at_ms=1_200)
    assert (report.refused_by_broker, report.refused_by_library) == (1, 1)
    assert report.tenures_refused == 1
    assert report.longest_gap_ms == 2_500
    assert report.failover_ms == 2_400
    assert report.ok


def test_the_table_has_a_row_per_scenario_with_sums_and_spreads():
    base = {"attempted": 10, "committed": 9, "fenced": 1, "unknown": 0, "unknown_visible": 0,
            "lost": 0, "duplicates": 0, "violations": [], "tenures": 2, "refused_by_broker": 1,
            "refused_by_library": 0, "tenures_refused": 1, "longest_gap_ms": 2000,
            "failover_ms": 1900}
    reports = [{**base, "scenario": "sigkill"},
               {**base, "scenario": "sigkill", "longest_gap_ms": 3000, "failover_ms": None},
               {**base, "scenario": "skew"}]
    rows = table(reports).splitlines()
    assert rows[2] == ("| sigkill | 2 | 0 | 20 | 18 | 2 / 0 | 2 | 0 (0) | 0 | 2500 / 3000 "
                       "| 1900 / 1900 |")
    assert rows[3].startswith("| skew | 1 | 0 |")


def test_a_report_is_one_json_line():
    attempts = [attempt("a", 1, 1, "committed", 1_000)]
    output = [(0, encode_record(attempts[0].record))]
    report = fault_report("x", check_history(output, attempts), attempts, [], None)
    assert report.line().startswith("FAULT-REPORT {")
    assert asdict(report)["failover_ms"] is None

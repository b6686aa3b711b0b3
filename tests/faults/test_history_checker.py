"""The history checker catches every kind of violation, and passes a clean history.

Histories here are made by hand: two tenures of the role, a writer each, and
the output a read_committed consumer would see.
"""

import io

import pytest

from tests.faults.history import (
    Attempt,
    HistoryRecord,
    HistoryWriter,
    attempts_from_journal,
    check_history,
    encode_record,
)
from tests.support.sim import LEASE, Cluster, crash


def write(writer: str, seq: int, tenure: int, token: tuple[int, int]) -> HistoryRecord:
    member = writer.split(".")[0]
    return HistoryRecord(writer, seq, member, "billing", token[0], token[1], tenure)


A1 = write("a.1", 1, tenure=3, token=(1000, 0))
A2 = write("a.1", 2, tenure=3, token=(1000, 0))
B1 = write("b.1", 1, tenure=9, token=(999, 0))  # a smaller producer id, a later tenure
B2 = write("b.1", 2, tenure=9, token=(999, 0))


def committed(*records: HistoryRecord) -> list[Attempt]:
    return [Attempt(record, "committed") for record in records]


def visible(*records: HistoryRecord, start: int = 10) -> list[tuple[int, bytes]]:
    return [(start + 2 * i, encode_record(record)) for i, record in enumerate(records)]


def test_a_clean_history_passes_with_its_counts():
    attempts = [*committed(A1, A2), Attempt(write("a.1", 3, 3, (1000, 0)), "fenced"),
                *committed(B1), Attempt(B2, "unknown")]
    report = check_history(visible(A1, A2, B1, B2), attempts)
    assert report.ok, report
    assert (report.attempted, report.committed, report.fenced, report.unknown) == (5, 3, 1, 1)
    assert (report.visible, report.tenures, report.lost, report.duplicates) == (4, 2, 0, 0)
    assert report.unknown_visible == 1


def test_an_unknown_outcome_may_be_absent():
    report = check_history(visible(A1), [*committed(A1), Attempt(A2, "unknown")])
    assert report.ok, report
    assert report.unknown_visible == 0


def test_the_output_is_checked_in_offset_order_whatever_order_it_is_given_in():
    output = list(reversed(visible(A1, A2, B1)))
    assert check_history(output, committed(A1, A2, B1)).ok


def test_a_record_of_an_earlier_tenure_after_a_later_one_is_a_tenure_regression():
    report = check_history(visible(A1, B1, A2), committed(A1, A2, B1))
    assert report.kinds() == {"tenure-regression"}
    assert report.violations[0].offset == 14


def test_a_committed_write_that_is_not_visible_is_lost():
    report = check_history(visible(A1, B1), committed(A1, A2, B1))
    assert report.kinds() == {"lost"}
    assert report.lost == 1


def test_a_committed_write_visible_twice_is_a_duplicate():
    report = check_history(visible(A1, A2, A2, B1), committed(A1, A2, B1))
    assert report.kinds() == {"duplicate"}
    assert report.duplicates == 1


def test_an_unknown_outcome_visible_twice_is_a_duplicate():
    report = check_history(visible(A1, A2, A2), [*committed(A1), Attempt(A2, "unknown")])
    assert report.kinds() == {"duplicate"}


def test_a_visible_write_that_raised_fenced_error_is_a_violation():
    report = check_history(visible(A1, A2, B1), [*committed(A1, B1), Attempt(A2, "fenced")])
    assert report.kinds() == {"fenced-visible"}


def test_a_visible_write_nobody_attempted_is_a_phantom():
    report = check_history(visible(A1, A2, B1), committed(A1, B1))
    assert report.kinds() == {"phantom"}


def test_a_visible_write_that_differs_from_its_attempt_is_a_phantom():
    forged = write("a.1", 2, tenure=3, token=(1000, 1))
    report = check_history(visible(A1, forged), committed(A1, A2))
    assert "phantom" in report.kinds()


def test_a_record_that_does_not_decode_is_malformed():
    output = [*visible(A1), (12, b"\xff not json"), (14, None)]
    report = check_history(output, committed(A1))
    assert report.kinds() == {"malformed"}
    assert [violation.offset for violation in report.violations] == [12, 14]


def test_one_tenure_under_two_tokens_is_a_token_conflict():
    other = write("c.1", 1, tenure=3, token=(1000, 7))
    report = check_history(visible(A1, other), committed(A1, other))
    assert report.kinds() == {"token-conflict"}


def test_one_token_in_two_tenures_is_a_token_conflict():
    other = write("c.1", 1, tenure=5, token=(1000, 0))
    report = check_history(visible(A1, other), committed(A1, other))
    assert report.kinds() == {"token-conflict"}


def test_two_attempts_logged_for_one_write_are_refused_as_a_broken_harness():
    with pytest.raises(ValueError, match="two attempts"):
        check_history([], [*committed(A1), Attempt(A1, "fenced")])


def test_an_attempt_with_an_unknown_outcome_name_is_refused():
    with pytest.raises(ValueError, match="outcome"):
        Attempt(A1, "maybe")  # type: ignore[arg-type]


def test_a_journal_attempt_without_an_end_line_is_unknown():
    journal = io.StringIO()
    journal.write(Attempt(A1, "committed", 1, 2).to_json() + "\n")
    journal.write('{"event": "start", "record": {"writer": "a.1", "seq": 2, "member": "a", '
                  '"role": "billing", "producer_id": 1000, "producer_epoch": 0, "tenure": 3}, '
                  '"started_ms": 5}\n')
    attempts = attempts_from_journal(journal.getvalue().splitlines())
    assert [(a.record, a.outcome) for a in attempts] == [(A1, "committed"), (A2, "unknown")]


async def test_a_history_writer_logs_committed_and_fenced_attempts_that_the_checker_accepts():
    cluster = Cluster()
    journal = io.StringIO()
    first = cluster.candidate("a")
    await cluster.until(first.done, within=1)
    zombie = first.result()
    writer = HistoryWriter("a.1", "out", 0, clock=cluster.clock, journal=journal)
    assert (await writer.write(zombie)).outcome == "committed"
    crash(zombie)
    successor = cluster.candidate("b")
    await cluster.until(successor.done, within=LEASE + 1)
    fenced = await writer.write(zombie)
    assert fenced.outcome == "fenced"
    output = [(r.offset, r.value) for r in cluster.broker.partition("out", 0)
              .read_committed(0).records]
    report = check_history(output, attempts_from_journal(journal.getvalue().splitlines()))
    assert report.ok, report
    assert (report.committed, report.fenced, report.visible) == (1, 1, 1)

"""`make test`'s parts: every test runs in exactly one, and the run fails if any part fails."""

from __future__ import annotations

import itertools

import pytest

from tests.split_run import NOTHING_RAN, PARTS, combined_status, not_passed

MARKERS = ("integration", "install", "own_brokers", "alone")


def _selects(expression: str, marks: set[str]) -> bool:
    """Whether pytest's `-m expression` selects a test with `marks` (and/or/not of names)."""
    return bool(eval(expression, {"__builtins__": {}}, {name: name in marks for name in MARKERS}))


@pytest.mark.parametrize("marks", [set(combination) for n in range(len(MARKERS) + 1)
                                   for combination in itertools.combinations(MARKERS, n)],
                         ids=lambda marks: "+".join(sorted(marks)) or "unmarked")
def test_each_test_runs_in_exactly_one_part(marks):
    assert [part for part, expression in PARTS.items() if _selects(expression, marks)] \
        in (["real-world"], ["cpu"], ["alone"])


@pytest.mark.parametrize(("marks", "part"), [
    (set(), "cpu"),
    ({"integration"}, "real-world"),
    ({"install"}, "real-world"),
    ({"integration", "own_brokers"}, "cpu"),
    ({"integration", "alone"}, "alone"),
])
def test_the_shared_broker_s_tests_run_one_at_a_time_and_own_brokers_run_beside_them(marks, part):
    assert [name for name, expression in PARTS.items() if _selects(expression, marks)] == [part]


@pytest.mark.parametrize(("statuses", "status"), [
    ([0, 0, 0], 0),
    ([1, 0, 0], 1),
    ([0, 1, 0], 1),
    ([0, 0, 1], 1),
    ([2, 1, 0], 2),  # the first failure's status
    ([NOTHING_RAN, 0, NOTHING_RAN], 0),  # -k selected tests of one part only
    ([0, NOTHING_RAN, 0], 0),
    ([NOTHING_RAN, 1, NOTHING_RAN], 1),
    ([NOTHING_RAN] * 3, NOTHING_RAN),  # nothing ran at all
])
def test_the_run_passes_only_if_each_part_passed_or_had_nothing_to_run(statuses, status):
    assert combined_status(statuses) == status


def test_the_closing_lines_name_each_failed_or_erred_test_of_a_part_s_report(tmp_path):
    report = tmp_path / "part.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.kafka.test_a" name="test_passes"/>'
        '<testcase classname="tests.kafka.test_a" name="test_fails[x]">'
        '<failure message="boom"/></testcase>'
        '<testcase classname="tests.kafka.test_b" name="test_errs">'
        '<error message="setup"/></testcase>'
        '<testcase classname="tests.kafka.test_b" name="test_skipped"><skipped/></testcase>'
        '</testsuite></testsuites>')
    assert not_passed(report) == [("tests.kafka.test_a::test_fails[x]", "failed"),
                                  ("tests.kafka.test_b::test_errs", "error")]


def test_a_part_that_wrote_no_report_names_nothing(tmp_path):
    assert not_passed(tmp_path / "missing.xml") == []

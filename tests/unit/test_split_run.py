"""`make test`'s two pytest halves: the run fails if either fails."""

from __future__ import annotations

import pytest

from tests.split_run import NOTHING_RAN, combined_status, not_passed


@pytest.mark.parametrize(("real", "rest", "status"), [
    (0, 0, 0),
    (1, 0, 1),
    (0, 1, 1),
    (2, 1, 2),  # the first failure's status
    (NOTHING_RAN, 0, 0),  # -k selected tests of one half only
    (0, NOTHING_RAN, 0),
    (NOTHING_RAN, 1, 1),
    (NOTHING_RAN, NOTHING_RAN, NOTHING_RAN),  # nothing ran at all
])
def test_the_run_passes_only_if_each_half_passed_or_had_nothing_to_run(real, rest, status):
    assert combined_status(real, rest) == status



def test_the_closing_lines_name_each_failed_or_erred_test_of_a_half_s_report(tmp_path):
    report = tmp_path / "half.xml"
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


def test_a_half_that_wrote_no_report_names_nothing_and_its_status_still_counts(tmp_path):
    assert not_passed(tmp_path / "missing.xml") == []
    assert combined_status(1, 0) == 1

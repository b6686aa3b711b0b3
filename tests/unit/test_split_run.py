"""`make test`'s two pytest halves: the run fails if either fails."""

from __future__ import annotations

import pytest

from tests.split_run import NOTHING_RAN, combined_status


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


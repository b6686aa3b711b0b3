"""``python -m bench metrics-series`` counts, from a worker's own exposition, the
series each role costs in each cardinality, and needs no server."""

from __future__ import annotations

import json
from pathlib import Path

from bench import cli


def test_metrics_series_counts_the_series_of_each_role_in_both_cardinalities(
        tmp_path: Path) -> None:
    out = tmp_path / "series.json"
    assert cli.main(["metrics-series", "--series-roles", "40", "--json", str(out)]) == 0
    rows = {r["metric"]: r for r in json.loads(out.read_text())}
    assert set(rows) == {"low", "per-role"}
    low, per_role = rows["low"], rows["per-role"]
    assert low["n"] == per_role["n"] == 40
    # Low cardinality: the held gauge alone is labelled by role.
    assert low["min"] == low["max"] == 1
    # Per role: the gauge, 2 series for each of 3 counters and 5 reasons, 15 for
    # the histogram.
    assert per_role["min"] == per_role["max"] == 1 + 3 * 2 + 5 * 2 + 15
    assert low["extra"]["series_per_role_stood_for"] == 1
    # What is not labelled by role does not grow with the roles in either mode.
    assert (low["extra"]["series_not_labelled_by_role"]
            == per_role["extra"]["series_not_labelled_by_role"] + 3 * 2 + 5 * 2 + 15)
    assert low["configuration"]["per_role_limit"] == 39


def test_metrics_series_needs_two_roles_to_have_a_limit_below_them() -> None:
    import pytest

    with pytest.raises(SystemExit, match="--series-roles"):
        cli.main(["metrics-series", "--series-roles", "1"])

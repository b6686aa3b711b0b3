"""The bench's statistics: the bootstrap interval of a p50 difference, and a table
that states no p99 of fewer than 100 samples and gives every comparison its interval."""

from __future__ import annotations

import random

import pytest

from bench.stats import P99_MIN_SAMPLES, Result, p50_difference, table


def test_the_difference_of_two_constant_samples_is_exact_with_no_spread() -> None:
    found = p50_difference([12.0] * 30, [5.0] * 40)
    assert found is not None
    assert (found.p50, found.low, found.high) == (7.0, 7.0, 7.0)
    assert found.excludes_zero()


def test_the_interval_holds_a_known_shift_and_excludes_zero() -> None:
    rng = random.Random(7)
    theirs = [rng.gauss(100.0, 5.0) for _ in range(200)]
    mine = [rng.gauss(110.0, 5.0) for _ in range(200)]
    found = p50_difference(mine, theirs)
    assert found is not None
    assert found.low < found.p50 < found.high
    assert found.low > 7.0
    assert found.high < 13.0
    assert found.excludes_zero()


def test_two_samples_of_one_distribution_are_not_told_apart() -> None:
    rng = random.Random(11)
    a = [rng.expovariate(1 / 50) for _ in range(30)]
    b = [rng.expovariate(1 / 50) for _ in range(30)]
    found = p50_difference(a, b)
    assert found is not None
    assert found.low < 0 < found.high
    assert not found.excludes_zero()


def test_the_interval_widens_with_fewer_samples() -> None:
    rng = random.Random(3)
    big_a = [rng.gauss(0.0, 10.0) for _ in range(400)]
    big_b = [rng.gauss(0.0, 10.0) for _ in range(400)]
    wide = p50_difference(big_a[:20], big_b[:20])
    narrow = p50_difference(big_a, big_b)
    assert wide is not None
    assert narrow is not None
    assert wide.high - wide.low > narrow.high - narrow.low


def test_the_interval_is_the_same_each_time_it_is_computed() -> None:
    a, b = [1.0, 5.0, 2.0, 8.0, 3.0], [4.0, 4.5, 9.0, 1.0]
    assert p50_difference(a, b) == p50_difference(a, b)


def test_an_empty_group_has_no_difference_and_bad_settings_are_refused() -> None:
    assert p50_difference([], [1.0]) is None
    assert p50_difference([1.0], []) is None
    with pytest.raises(ValueError, match="confidence"):
        p50_difference([1.0], [2.0], confidence=1.0)
    with pytest.raises(ValueError, match="resamples"):
        p50_difference([1.0], [2.0], resamples=0)


def _cells(text: str, system: str, figure: str = "crash-failover") -> dict[str, str]:
    lines = text.splitlines()
    head = [c.strip() for c in lines[0].split("|")[1:-1]]
    for line in lines[2:]:
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if cells[:2] == [figure, system]:
            return dict(zip(head, cells, strict=True))
    raise AssertionError(f"no row {figure} {system}")


def test_a_p99_of_fewer_than_100_samples_is_marked_as_not_a_claim() -> None:
    few = Result("crash-failover", "krabka", "ms", [float(i) for i in range(30)], {})
    many = Result("crash-failover", "etcd", "ms",
                  [float(i) for i in range(P99_MIN_SAMPLES)], {})
    assert few.to_json()["p99_is_a_claim"] is False
    assert many.to_json()["p99_is_a_claim"] is True
    text = table([few, many], markdown=True)
    assert _cells(text, "krabka")["p99"] == "(28.7)"
    assert _cells(text, "etcd")["p99"] == "98.0"
    assert f"fewer than {P99_MIN_SAMPLES} samples, not a claim" in text


def test_the_table_gives_each_row_its_p50_difference_from_ours_with_an_interval() -> None:
    ours = Result("graceful-handover", "krabka", "ms", [10.0] * 20, {})
    term = Result("graceful-handover", "krabka-term", "ms", [8.0] * 20, {})
    peer = Result("graceful-handover", "etcd", "ms", [4.0] * 20, {})
    text = table([ours, term, peer], markdown=True)
    row = _cells(text, "etcd", "graceful-handover")
    assert row["ours-row p50 [95% CI]"] == "+6.00 [+6.00, +6.00]"
    assert row["term-row p50 [95% CI]"] == "+4.00 [+4.00, +4.00]"
    assert _cells(text, "krabka", "graceful-handover")["ours-row p50 [95% CI]"] == "-"
    assert _cells(text, "krabka-term", "graceful-handover")["ours-row p50 [95% CI]"] == (
        "+2.00 [+2.00, +2.00]")
    plain = table([ours, peer])
    assert "ours-row p50 [95% CI]" in plain.splitlines()[0]
    assert "term-row" not in plain.splitlines()[0]

"""Summaries (min / p50 / p90 / p99 / max), the JSON objects and the printed table.

Two rules keep the table from claiming more than its samples hold: a p99 of
fewer than `P99_MIN_SAMPLES` samples is printed in parentheses and is not a
claim (of 30 samples it is the largest but one, interpolated), and every
comparison of two systems' p50 comes with a bootstrap confidence interval of
the difference (`p50_difference`), so "no slower" can be read against the
noise of the same run.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

P99_MIN_SAMPLES = 100
"""The fewest samples whose p99 the table states as a figure."""
BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), q in [0, 100]."""
    if not sorted_values:
        return math.nan
    if len(sorted_values) == 1:
        return sorted_values[0]
    rank = (len(sorted_values) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (rank - low)


def p99_is_a_claim(samples: int) -> bool:
    """Whether a p99 of `samples` samples is stated as a figure (not in parentheses)."""
    return samples >= P99_MIN_SAMPLES


@dataclass(frozen=True)
class Difference:
    """p50(mine) - p50(theirs) and its bootstrap confidence interval."""

    p50: float
    low: float
    high: float
    confidence: float

    def excludes_zero(self) -> bool:
        """Whether the interval says which p50 is the larger one."""
        return self.low > 0 or self.high < 0


def p50_difference(mine: Sequence[float], theirs: Sequence[float], *,
                   resamples: int = BOOTSTRAP_RESAMPLES, confidence: float = CONFIDENCE,
                   seed: int = 0) -> Difference | None:
    """The difference of the two p50s with a percentile-bootstrap interval.

    Each resample draws both groups again with replacement, each at its own
    size (the systems' trials are independent), and takes the difference of
    the medians; the interval is the central `confidence` of those
    differences. Seeded, so a table printed twice from one run's samples
    reads the same. None when either group is empty.
    """
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, got {resamples}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie between 0 and 1, got {confidence}")
    if not mine or not theirs:
        return None
    rng = random.Random(seed)
    mine, theirs = list(mine), list(theirs)
    differences = sorted(
        percentile(sorted(rng.choices(mine, k=len(mine))), 50)
        - percentile(sorted(rng.choices(theirs, k=len(theirs))), 50)
        for _ in range(resamples))
    tail = (1 - confidence) / 2 * 100
    return Difference(percentile(sorted(mine), 50) - percentile(sorted(theirs), 50),
                      percentile(differences, tail), percentile(differences, 100 - tail),
                      confidence)


@dataclass
class Result:
    """One figure for one system (and, where a figure has several, one metric)."""

    figure: str
    system: str
    unit: str
    samples: list[float]
    configuration: dict[str, Any]
    metric: str | None = None
    higher_is_better: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    skipped: str | None = None

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Result:
        """Back from `to_json` (with samples)."""
        return cls(obj["figure"], obj["system"], obj["unit"], list(obj.get("samples") or []),
                   obj.get("configuration") or {}, metric=obj.get("metric"),
                   higher_is_better=obj.get("higher_is_better", False),
                   extra=obj.get("extra") or {}, skipped=obj.get("skipped"))

    def to_json(self, *, with_samples: bool = True) -> dict[str, Any]:
        values = sorted(self.samples)
        out: dict[str, Any] = {"figure": self.figure, "system": self.system}
        if self.metric is not None:
            out["metric"] = self.metric
        out.update({
            "unit": self.unit,
            "n": len(values),
            "min": values[0] if values else None,
            "p50": _num(percentile(values, 50)),
            "p90": _num(percentile(values, 90)),
            "p99": _num(percentile(values, 99)),
            "p99_is_a_claim": p99_is_a_claim(len(values)),
            "max": values[-1] if values else None,
            "higher_is_better": self.higher_is_better,
            "configuration": self.configuration,
        })
        if self.extra:
            out["extra"] = self.extra
        if self.skipped:
            out["skipped"] = self.skipped
        if with_samples:
            out["samples"] = self.samples
        return out


def _num(value: float) -> float | None:
    return None if math.isnan(value) else value


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    magnitude = abs(value)
    if magnitude >= 100_000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def _ratio(mine: float | None, theirs: float | None) -> str:
    if mine is None or theirs is None:
        return "-"
    if theirs:
        return f"{mine / theirs:.2f}"
    return "=" if mine == 0 else "-"


def _signed(value: float) -> str:
    return ("+" if value > 0 else "") + _fmt(value)


def _difference(mine: Result | None, theirs: Result) -> str:
    """``+d [low, high]``: p50(mine) - p50(theirs) with its 95 % interval."""
    if mine is None or mine is theirs:
        return "-"
    found = p50_difference(mine.samples, theirs.samples)
    if found is None:
        return "-"
    return f"{_signed(found.p50)} [{_signed(found.low)}, {_signed(found.high)}]"


def _p99(j: dict[str, Any]) -> str:
    text = _fmt(j["p99"])
    return text if j["p99_is_a_claim"] or j["p99"] is None else f"({text})"


TABLE_LEGEND = (f"p99 in parentheses: fewer than {P99_MIN_SAMPLES} samples, not a claim. "
                f"ours-row and term-row: the difference of the p50s (in the row's unit) with "
                f"its {CONFIDENCE:.0%} bootstrap interval ({BOOTSTRAP_RESAMPLES} resamples); "
                f"an interval holding 0 does not tell the two apart.")


def table(results: list[Result], *, markdown: bool = False) -> str:
    """One row per figure/metric/system, with p50 ratio ours/peer (krabka is ours).

    When term mode ran (system ``krabka-term``), a second ratio column gives
    term mode's p50 over each other row's: epoch mode's and the peers'. After
    the ratios, the same comparisons as differences of the p50s with their
    bootstrap intervals (`p50_difference`). The legend (`TABLE_LEGEND`) ends
    the table.
    """
    rows = []
    by: dict[tuple[str, str | None, str], Result] = {
        (r.figure, r.metric, r.system): r for r in results}
    p50s = {key: r.to_json(with_samples=False)["p50"] for key, r in by.items()}
    term = "krabka-term"
    with_term = any(r.system == term for r in results)
    for r in results:
        j = r.to_json(with_samples=False)
        ours = "-" if r.system == "krabka" else _ratio(p50s.get((r.figure, r.metric, "krabka")),
                                                         j["p50"])
        label = r.figure if r.metric is None else f"{r.figure}:{r.metric}"
        row = [label, r.system, r.unit, str(j["n"]), _fmt(j["min"]), _fmt(j["p50"]),
               _fmt(j["p90"]), _p99(j), _fmt(j["max"]), ours]
        if with_term:
            row.append("-" if r.system == term
                       else _ratio(p50s.get((r.figure, r.metric, term)), j["p50"]))
        row.append(_difference(by.get((r.figure, r.metric, "krabka")), r))
        if with_term:
            row.append(_difference(by.get((r.figure, r.metric, term)), r))
        rows.append([*row, r.skipped or ""])
    head = ["figure", "system", "unit", "n", "min", "p50", "p90", "p99", "max",
            "ours/peer p50", *(["term/row p50"] if with_term else []),
            "ours-row p50 [95% CI]", *(["term-row p50 [95% CI]"] if with_term else []), "note"]
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join([*lines, "", TABLE_LEGEND])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=False)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*head), fmt.format(*("-" * w for w in widths)),
                      *(fmt.format(*row) for row in rows), "", TABLE_LEGEND])


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.stats RESULTS.json``: the table again, as Markdown."""
    import json
    import sys
    from pathlib import Path

    args = sys.argv[1:] if argv is None else argv
    rows = json.loads(Path(args[0]).read_text())
    print(table([Result.from_json(r) for r in rows], markdown=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Summaries (min / p50 / p90 / p99 / max), the JSON objects and the printed table."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


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


def table(results: list[Result], *, markdown: bool = False) -> str:
    """One row per figure/metric/system, with p50 ratio ours/peer (krabka is ours).

    When term mode ran (system ``krabka-term``), a second ratio column gives
    term mode's p50 over each other row's: epoch mode's and the peers'.
    """
    rows = []
    p50s: dict[tuple[str, str | None, str], float | None] = {
        (r.figure, r.metric, r.system): r.to_json(with_samples=False)["p50"] for r in results}
    term = "krabka-term"
    with_term = any(r.system == term for r in results)
    for r in results:
        j = r.to_json(with_samples=False)
        ours = "-" if r.system == "krabka" else _ratio(p50s.get((r.figure, r.metric, "krabka")),
                                                         j["p50"])
        label = r.figure if r.metric is None else f"{r.figure}:{r.metric}"
        row = [label, r.system, r.unit, str(j["n"]), _fmt(j["min"]), _fmt(j["p50"]),
               _fmt(j["p90"]), _fmt(j["p99"]), _fmt(j["max"]), ours]
        if with_term:
            row.append("-" if r.system == term
                       else _ratio(p50s.get((r.figure, r.metric, term)), j["p50"]))
        rows.append([*row, r.skipped or ""])
    head = ["figure", "system", "unit", "n", "min", "p50", "p90", "p99", "max",
            "ours/peer p50", *(["term/row p50"] if with_term else []), "note"]
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=False)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*head), fmt.format(*("-" * w for w in widths)),
                      *(fmt.format(*row) for row in rows)])


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

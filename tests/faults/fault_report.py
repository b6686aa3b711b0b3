"""Sum up fault-run reports into the table of docs/reliability.md.

    FAULT_TRIALS=10 FAULT_REPORT_FILE=/tmp/faults.jsonl \\
        python -m pytest tests/faults/test_faults_real.py tests/faults/test_faults_broker.py \\
        tests/faults/test_faults_cluster.py
    python -m tests.faults.fault_report /tmp/faults.jsonl

Each line of the file is one `FaultReport` (`tests/faults/fault_run.py`); the table
has one row per scenario: trials, violations, the writes' outcomes summed
over the trials, and the time without a working leader (longest gap between
two commits) and the failover time (from the fault to the first commit of a
later tenure) as median and maximum.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

COLUMNS = ("scenario", "trials", "violations", "attempted", "committed",
           "fenced: by broker / by library", "tenures ended by a broker refusal",
           "unknown (visible)", "lost", "longest gap ms, median / max",
           "failover ms, median / max")


def _spread(values: list[int]) -> str:
    if not values:
        return "n/a"
    return f"{statistics.median(values):.0f} / {max(values)}"


def table(reports: list[dict[str, Any]]) -> str:
    """A markdown table, one row per scenario, in first-seen order."""
    by_scenario: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for report in reports:
        by_scenario[report["scenario"]].append(report)
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    for scenario, runs in by_scenario.items():
        def total(key: str, runs: list[dict[str, Any]] = runs) -> int:
            return sum(int(run[key]) for run in runs)

        failovers = [run["failover_ms"] for run in runs if run["failover_ms"] is not None]
        row = [
            scenario, str(len(runs)), str(sum(len(run["violations"]) for run in runs)),
            str(total("attempted")), str(total("committed")),
            f"{total('refused_by_broker')} / {total('refused_by_library')}",
            str(total("tenures_refused")),
            f"{total('unknown')} ({total('unknown_visible')})", str(total("lost")),
            _spread([run["longest_gap_ms"] for run in runs]), _spread(failovers),
        ]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("file", type=Path, help="a FAULT_REPORT_FILE")
    args = parser.parse_args()
    reports = []
    for line in args.file.read_text().splitlines():
        text = line.removeprefix("FAULT-REPORT ").strip()
        if text:
            reports.append(json.loads(text))
    print(table(reports))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`make test`: the whole suite as two pytest processes side by side, then a third.

    python -m tests.split_run [PYTEST ARGS ...]

The tests marked `integration` or `install` (real brokers, worker processes,
browsers, PyPI) spend most of their time waiting on the network and on
timers; the others (the simulation, the property and unit tests) are
CPU-bound on a `ManualClock`, which a busy core slows but cannot break. One
after the other they took 1 137 s and 657 s of a 30-minute run on a
two-core machine; side by side a run takes about as long as the longer part.
So a run has three parts:

- **real-world**, in the foreground, writing to the terminal as one pytest
  run would: the `integration` and `install` tests that use the suite's
  shared broker, one at a time;
- **cpu**, in the background, beside it, writing to a file under the
  pytest cache that is printed at the end: the CPU-bound tests, and the
  tests marked `own_brokers` (each starts and stops brokers of its own,
  so they share nothing with the real-world part but the cores);
- **alone**, once both are done: the tests marked `alone`, whose verdict
  depends on how loaded the machine is (a group of member processes timed
  by the state topic's record timestamps), with nothing beside them.

The last lines name every test that failed or erred in any part (from each
part's JUnit XML report), so a log cut to its tail still says what broke.
The exit status is 0 only if every part passed or had nothing to run
(pytest's 5, as when ``-k`` selects tests of one part only), else the first
other status. Each part gets its own range of ports (tests/support/ports.py),
so the servers of one never take a port another has just chosen. Ctrl-C
reaches every part (they share the terminal's process group); the
background part is stopped by PID if this process ends another way.

pytest-xdist would be the usual tool, but its ``loadgroup`` distribution no
longer keeps a group on one worker under pytest 9.2, and the real-world
tests must not run two at a time: they share one broker, and their timing
was tuned one by one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REAL_WORLD = "integration or install"
PARTS = {
    "real-world": f"({REAL_WORLD}) and not own_brokers and not alone",
    "cpu": f"(not ({REAL_WORLD}) or own_brokers) and not alone",
    "alone": "alone",
}
"""Each part's marker expression: together they select every test once."""
NOTHING_RAN = 5  # pytest's exit status when no test was selected
PORTS = {"real-world": "20000-23999", "cpu": "24000-27999", "alone": "28000-31999"}
"""Each part's ports (tests/support/ports.py)."""


def main(args: list[str]) -> int:
    cache = ROOT / ".pytest_cache"
    cache.mkdir(exist_ok=True)
    log = cache / "split-run-cpu.log"
    reports = {part: cache / f"split-run-{part}.xml" for part in PARTS}
    for report in reports.values():
        report.unlink(missing_ok=True)

    def pytest(part: str) -> list[str]:
        return [sys.executable, "-m", "pytest", "-m", PARTS[part],
                f"--junitxml={reports[part]}", *args]

    def env(part: str) -> dict[str, str]:
        return {**os.environ, "TESTS_PORTS": PORTS[part]}

    status = {}
    with log.open("w") as output:
        cpu = subprocess.Popen(pytest("cpu"), cwd=ROOT, env=env("cpu"),
                               stdout=output, stderr=subprocess.STDOUT)
        try:
            print(f"the cpu part: pytest (pid {cpu.pid}) in the background, its output in "
                  f"{log.relative_to(ROOT)}, printed at the end", flush=True)
            status["real-world"] = subprocess.call(pytest("real-world"), cwd=ROOT,
                                                   env=env("real-world"))
            status["cpu"] = cpu.wait()
        finally:
            if cpu.poll() is None:
                cpu.terminate()
                cpu.wait()
    print("\n===== the tests marked 'alone', with nothing beside them =====", flush=True)
    status["alone"] = subprocess.call(pytest("alone"), cwd=ROOT, env=env("alone"))
    print(f"\n===== the cpu part (exit {status['cpu']}) =====", flush=True)
    sys.stdout.write(log.read_text())
    for part, report in reports.items():
        for test, outcome in not_passed(report):
            print(f"{outcome.upper()} ({part} part): {test}", flush=True)
    print("\nexit: " + ", ".join(f"{code} ({part})" for part, code in status.items()),
          flush=True)
    return combined_status(list(status.values()))


def combined_status(statuses: list[int]) -> int:
    """The run's exit status from its parts' pytest statuses."""
    failed = [code for code in statuses if code not in (0, NOTHING_RAN)]
    if failed:
        return failed[0]
    return NOTHING_RAN if all(code == NOTHING_RAN for code in statuses) else 0


def not_passed(report: Path) -> list[tuple[str, str]]:
    """(test, "failed" or "error") for each such test case of a JUnit XML report.

    A part that crashed before writing its report has none; its exit status
    still fails the run."""
    if not report.exists():
        return []
    found = []
    for case in ET.parse(report).getroot().iter("testcase"):
        for outcome in ("failure", "error"):
            if case.find(outcome) is not None:
                test = f"{case.get('classname', '')}::{case.get('name', '')}"
                found.append((test, "failed" if outcome == "failure" else "error"))
    return found


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

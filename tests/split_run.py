"""`make test`: the whole suite as two pytest processes side by side.

    python -m tests.split_run [PYTEST ARGS ...]

The tests marked `integration` or `install` (real brokers, worker processes,
browsers, PyPI) spend most of their time waiting on the network and on
timers; the others (the simulation, the property and unit tests) are
CPU-bound on a `ManualClock`, which a busy core slows but cannot break. One
after the other they took 1 137 s and 657 s of a 30-minute run on a
two-core machine; side by side a run takes about as long as the longer half.

The real-world half runs in the foreground and writes to the terminal, as
one pytest run would; the other half writes to a file under the pytest
cache, printed once both are done. The last lines name every test that
failed or erred in either half (from each half's JUnit XML report), so a
log cut to its tail still says what broke. The exit status is 0 only if both
halves passed or had nothing to run (pytest's 5, as when ``-k`` selects
tests of one half only), else the first other status of the two. Each half gets
its own range of ports (tests/support/ports.py), so the servers of one
never take a port the other has just chosen. Ctrl-C reaches both (they
share the terminal's process group); the background half is stopped by
PID if this process ends another way.

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
NOTHING_RAN = 5  # pytest's exit status when no test was selected
PORTS = {"real-world": "20000-25999", "cpu": "26000-31999"}  # tests/support/ports.py


def main(args: list[str]) -> int:
    cache = ROOT / ".pytest_cache"
    cache.mkdir(exist_ok=True)
    log = cache / "split-run-cpu.log"
    reports = {"real-world": cache / "split-run-real-world.xml", "cpu": cache / "split-run-cpu.xml"}
    for report in reports.values():
        report.unlink(missing_ok=True)
    pytest = [sys.executable, "-m", "pytest"]
    with log.open("w") as output:
        cpu = subprocess.Popen(
            [*pytest, "-m", f"not ({REAL_WORLD})", f"--junitxml={reports['cpu']}", *args], cwd=ROOT,
            env={**os.environ, "TESTS_PORTS": PORTS["cpu"]},
            stdout=output, stderr=subprocess.STDOUT)
        try:
            print(f"tests not marked {REAL_WORLD!r}: pytest (pid {cpu.pid}) in the background, "
                  f"its output in {log.relative_to(ROOT)}, printed at the end", flush=True)
            real = subprocess.call(
                [*pytest, "-m", REAL_WORLD, f"--junitxml={reports['real-world']}", *args], cwd=ROOT,
                env={**os.environ, "TESTS_PORTS": PORTS["real-world"]})
            rest = cpu.wait()
        finally:
            if cpu.poll() is None:
                cpu.terminate()
                cpu.wait()
    print(f"\n===== the tests not marked {REAL_WORLD!r} (exit {rest}) =====", flush=True)
    sys.stdout.write(log.read_text())
    for half, report in reports.items():
        for test, outcome in not_passed(report):
            print(f"{outcome.upper()} ({half} half): {test}", flush=True)
    print(f"\nexit: {real} (marked {REAL_WORLD!r}), {rest} (the others)", flush=True)
    return combined_status(real, rest)


def not_passed(report: Path) -> list[tuple[str, str]]:
    """(test, "failed" or "error") for each such test case of a JUnit XML report.

    A half that crashed before writing its report has none; its exit status
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


def combined_status(real: int, rest: int) -> int:
    """The run's exit status from the two halves' pytest statuses."""
    failed = [code for code in (real, rest) if code not in (0, NOTHING_RAN)]
    if failed:
        return failed[0]
    return NOTHING_RAN if real == rest == NOTHING_RAN else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

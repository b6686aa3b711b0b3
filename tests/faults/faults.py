"""Faults a test injects into its own process."""

import time
from collections.abc import Callable

PROBE_INTERVAL = 0.2
"""Seconds between looks at the outside world while this process is stopped."""


def stop_the_world_until(condition: Callable[[], bool], within: float) -> None:
    """Block this whole process, event loop included, until `condition()` holds.

    This is the fault, a process that stops running (a long GC pause, a
    stopped VM) while its peers and the broker go on; it ends as soon as the
    outside world has moved as the test needs, or fails after `within` s.
    `condition` must not need this process's event loop.
    """
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"the world did not move within {within} s"
        time.sleep(PROBE_INTERVAL)

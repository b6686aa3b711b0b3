"""Faults a test injects into its own process."""

import time


def stop_the_world(seconds: float) -> None:
    """Block this whole process, event loop included, for `seconds`.

    Not a wait for a condition: this is the fault, a process that stops
    running (a long GC pause, a stopped VM) while its peers and the broker
    go on.
    """
    time.sleep(seconds)

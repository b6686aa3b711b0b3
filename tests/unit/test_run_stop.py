"""`make run`'s stop request (deploy/run.py): the SIGINT/SIGTERM handler sets
it, and it may run on the main thread at any bytecode of the thread's wait."""

from __future__ import annotations

import importlib.util
import sys
import threading
from pathlib import Path

import pytest

RUN = Path(__file__).resolve().parents[2] / "deploy" / "run.py"


@pytest.fixture(scope="module")
def run_module():
    spec = importlib.util.spec_from_file_location("deploy_run", RUN)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _set_at_every_call_inside_the_wait(stop) -> bool:
    """Wait on `stop` in a thread whose profiler sets `stop` at every call the wait
    makes, as a signal handler may run between any two of its bytecodes; whether
    the wait returned (a handler that waits for a lock the wait holds never does)."""
    returned = threading.Event()

    def hook(frame, event, arg):
        if event in ("call", "c_call") and frame.f_code.co_name != "waiting":
            stop.set()

    def waiting():
        sys.setprofile(hook)
        try:
            stop.wait(0.5)
        finally:
            sys.setprofile(None)
        returned.set()

    thread = threading.Thread(target=waiting, daemon=True)  # a deadlocked one is left behind
    thread.start()
    return returned.wait(5)


def test_a_stop_requested_in_the_middle_of_its_wait_ends_the_wait(run_module):
    stop = run_module.StopRequest()
    assert _set_at_every_call_inside_the_wait(stop)
    assert stop.is_set()


def test_a_threading_event_set_in_the_middle_of_its_wait_can_wait_for_itself_forever():
    """Why the stop request is not a `threading.Event` (what the test above guards)."""
    assert not _set_at_every_call_inside_the_wait(threading.Event())


def test_a_stop_request_waits_out_its_timeout_when_nobody_sets_it(run_module):
    stop = run_module.StopRequest()
    assert stop.wait(0.01) is False
    stop.set()
    assert stop.wait(10) is True

"""The worker's changes to Faust stay in the worker's app: after the app is built,
installed and used in a fresh interpreter, every class of faust-streaming,
mode-streaming and aiokafka has exactly the attributes upstream gave it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _changed_upstream_attributes(*args: str) -> list[str]:
    result = subprocess.run([sys.executable, "-m", "tests.app.upstream_classes", *args],
                            capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_no_faust_mode_or_aiokafka_class_attribute_differs_from_upstream_after_install():
    assert _changed_upstream_attributes() == []


def test_a_global_change_to_an_upstream_class_is_seen():
    """The comparison can fail: a class attribute replaced as a global patch
    replaces it is reported."""
    assert _changed_upstream_attributes("--global-change") == [
        "mode.utils.queues:FlowControlEvent.resume"]

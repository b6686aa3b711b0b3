"""The transport contract suite fails on a broker that breaks one Kafka rule.

Each broken `MemoryBroker` of tests/faults/broken_brokers.py drops one rule the
protocol relies on; the memory half of tests/kafka/test_transport_contract.py,
run against it in a subprocess, must report exactly the tests of that rule
as failed (and nothing else, so the failures are the rule's, not noise).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.transport_backends import BROKER_VARIABLE

ROOT = Path(__file__).resolve().parents[2]
SUITE = "tests/kafka/test_transport_contract.py"

FAILING = {
    "no-fencing": {
        "test_a_lease_write_of_a_superseded_producer_is_fenced",
        "test_a_transaction_open_past_its_timeout_is_aborted_with_a_bump",
    },
    "aborted-visible": {
        "test_a_challenge_during_an_open_transaction_aborts_it_with_an_extra_bump",
        "test_a_conditional_bump_with_a_stale_epoch_aborts_the_current_epochs_open_transaction",
        "test_a_transaction_open_past_its_timeout_is_aborted_with_a_bump",
        "test_aborted_records_stay_invisible",
        "test_a_tail_reports_an_open_transaction_and_wakes_when_it_ends",
    },
    "no-stable-offset": {
        "test_records_of_an_open_transaction_are_invisible_and_hold_the_stable_offset",
        "test_a_read_from_an_offset_returns_what_a_read_from_0_returns_from_there",
        "test_a_tail_reports_an_open_transaction_and_wakes_when_it_ends",
    },
}


def run_suite(broker: str) -> tuple[int, set[str], str]:
    """Run the memory half of the suite on `broker`; the exit code and the failed tests."""
    env = {**os.environ, BROKER_VARIABLE: broker}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", SUITE, "-m", "not integration", "-q", "-rf",
         "-p", "no:cacheprovider", "-o", "addopts="],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    failed = set(re.findall(r"^FAILED \S+::(\w+)\[memory\]", done.stdout, re.MULTILINE))
    return done.returncode, failed, done.stdout + done.stderr


@pytest.mark.parametrize("broker", sorted(FAILING))
def test_the_contract_suite_fails_on_a_broken_broker(broker):
    code, failed, output = run_suite(broker)
    assert code == 1, output
    assert failed == FAILING[broker], output

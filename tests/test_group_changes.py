"""A short group-change fault run on the real broker (the long one is
``python -m tests.group_changes --long``; see that module for every check).

Two workers of the application with three user roles: the worker leading the
most roles is SIGKILLed and started again at once (same member id, its lease
still live, its consumer still in the group), then the leader is stopped
cleanly, then a worker joins. After each change the group must settle with
no worker exiting on its own, every role held again within lease + stagger x
members of a candidate being available, no two functions of a role running
at once, the events topic naming exactly the state topic's tenures, and
every worker's web view showing the state topic's holder and token; at the
end the history checker finds nothing.
"""

from __future__ import annotations

import pytest

from tests.group_changes import SHORT_SCRIPT, run_sequence

pytestmark = pytest.mark.integration


def test_two_workers_survive_a_kill_a_clean_stop_of_the_leader_and_a_join(
        kafka_bootstrap, tmp_path):
    summary = run_sequence(kafka_bootstrap, tmp_path, 2, SHORT_SCRIPT)
    print(f"\n{summary.text()}")
    assert summary.findings == []
    assert summary.changes == len(SHORT_SCRIPT)
    assert summary.handovers >= 2  # the kill and the clean stop each moved a role

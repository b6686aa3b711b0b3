"""The whole-worker figures of the bench: how they are registered and what "recovered"
compares (the figures themselves start Faust workers and are run by ``python -m bench``)."""

from __future__ import annotations

import inspect

from bench import cli
from bench.worker_figures import _rows

WHOLE_WORKER = ("worker-fold", "worker-recovery", "event-latency", "webview-latency")


def test_the_whole_worker_figures_run_with_a_broker_and_before_the_scale_figures() -> None:
    for name in WHOLE_WORKER:
        assert name in cli.FIGURES
        assert name in cli.NEEDS_KAFKA
        assert name not in cli.WITH_PEERS  # their baselines are raw clients, not peers
        assert inspect.iscoroutinefunction(cli.figure_runner(name))
    assert cli.FIGURES[-2:] == ("roles-scale", "roles-scale-group")
    assert max(cli.FIGURES.index(name) for name in WHOLE_WORKER) < cli.FIGURES.index("roles-scale")
    args = cli.parser().parse_args([*WHOLE_WORKER, "--quick", "--recovery-roles", "50",
                                    "--commit-intervals", "0.1,0.5"])
    assert args.figures == list(WHOLE_WORKER)
    assert (args.recovery_roles, args.commit_intervals) == (50, "0.1,0.5")


def test_a_recovered_listing_is_compared_without_the_status_computed_at_the_read() -> None:
    before = {"roles": [{"role": "a", "holder": "m1", "offset": 7, "status": "held"}],
              "now": 1, "unavailable": []}
    after = {"roles": [{"role": "a", "holder": "m1", "offset": 7, "status": "lapsed"}],
             "now": 2, "unavailable": []}
    assert _rows(before) == _rows(after) == {"a": {"role": "a", "holder": "m1", "offset": 7}}
    moved = {"roles": [{"role": "a", "holder": "m1", "offset": 6, "status": "held"}]}
    assert _rows(moved) != _rows(before)
    assert _rows({"error": "no worker owns the state partitions yet"}) is None
    assert _rows(None) is None

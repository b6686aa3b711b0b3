"""The scale figures' arithmetic: acquisition budget, growth against linear, the
hash's preferred split, the open-file limit the bench asks for, the plots
(a run's replace an earlier run's),
what a stopped run says of the broker, and how a tenure's renewals reach the
bench's timer and the worker's admission."""

from __future__ import annotations

import gc
import resource
from types import SimpleNamespace

from bench import limits
from bench.plots import plot_all
from bench.scale import (
    acquisition_budget,
    broker_state,
    gc_summary,
    group_outcome,
    growth,
    preferred_split,
)
from bench.scale_worker import GcPauses


def test_the_budget_fits_a_linear_acquisition_at_the_rate_of_the_largest_n_measured():
    # 1 000 roles in 100 s (10 roles/s, slower than any run measured so far):
    # 10 000 at that rate take 1 000 s, and the budget leaves room beyond it.
    assert acquisition_budget(10_000, {100: 5.0, 1000: 100.0}) > 10 * 100.0
    # Nothing measured yet: the fixed allowance of 4 roles/s.
    assert acquisition_budget(10_000, {}) == 60 + 10_000 * 0.25


def test_growth_is_one_when_acquisition_time_is_linear_in_the_roles():
    rate = growth({100: 1.0, 1000: 10.0, 10_000: 100.0})
    assert rate is not None
    assert (rate["from_roles"], rate["to_roles"]) == (1000, 10_000)
    assert rate["vs_linear"] == 1.0


def test_growth_above_one_says_superlinear_and_falls_back_to_the_smallest_n():
    rate = growth({100: 1.0, 400: 8.0})
    assert rate is not None
    assert rate["from_roles"] == 100
    assert rate["vs_linear"] == 2.0


def test_growth_needs_two_sizes():
    assert growth({1000: 9.0}) is None


def test_the_preferred_split_gives_every_role_to_exactly_one_member():
    members = ["group-1", "group-2", "group-3"]
    split = preferred_split([f"role-{i:03d}" for i in range(300)], members)
    assert sum(split.values()) == 300
    assert all(60 < held < 140 for held in split.values()), split


def test_the_file_limit_asked_for_fits_the_roles_and_is_capped_by_the_kernel(monkeypatch):
    assert limits.wanted_file_limit(10_000) >= 2 * 10_000 + 250
    monkeypatch.setattr(limits, "_read_int", lambda path: 50_000)  # fs.nr_open
    assert limits.wanted_file_limit(10**6) == 50_000


def test_a_refused_raise_is_recorded_and_leaves_the_limit_as_it_was(monkeypatch):
    before = resource.getrlimit(resource.RLIMIT_NOFILE)

    def refuse(which: int, value: tuple[int, int]) -> None:
        raise ValueError("not allowed to raise maximum limit")

    monkeypatch.setattr(limits.os, "geteuid", lambda: 0)
    monkeypatch.setattr(limits.resource, "setrlimit", refuse)
    record = limits.raise_file_limit(10**6)
    assert record["raised"] is False
    assert "refused" in record["why"]
    assert record["after"] == list(before)


def test_not_root_keeps_the_hard_limit(monkeypatch):
    monkeypatch.setattr(limits.os, "geteuid", lambda: 1000)
    record = limits.raise_file_limit(10**6)
    assert record["raised"] is False
    assert record["why"].startswith("not root")


def _row(figure: str, metric: str, samples: list[float], config: dict[str, object]) -> dict:
    ordered = sorted(samples)
    return {"figure": figure, "system": "krabka", "metric": metric, "samples": samples,
            "n": len(samples), "min": ordered[0], "max": ordered[-1],
            "p50": ordered[len(ordered) // 2], "p90": ordered[-1], "p99": ordered[-1],
            "configuration": config}


def test_the_scale_plots_are_drawn_from_a_run_s_rows(tmp_path):
    rows = []
    for n, seconds in ((100, 1.0), (1000, 9.0), (4000, 40.0)):
        config = {"acquire_s": seconds, "lease_s": 30.0, "renew_s": 10.0, "limit": "none",
                  "acquisition_growth": growth({100: 1.0, 1000: 9.0, 4000: 40.0})}
        rows += [_row("roles-scale", f"{metric}@{n}", [float(n)], config)
                 for metric in ("rss", "fds", "cpu", "renewal-lateness")]
    members = ["group-1", "group-2", "group-3"]
    group = {"members": members, "roles": 30, "split": dict.fromkeys(members, 10),
             "preferred_split": dict.fromkeys(members, 10), "acquire_s": 2.0,
             "roles_lost_while_holding": 0, "lease_s": 30.0, "renew_s": 10.0, "hold_s": 12.0}
    rows += [_row("roles-scale-group", f"{metric}@{m}", [10.0], group)
             for m in members for metric in ("held", "rss", "cpu", "fds")]
    written = plot_all(rows, tmp_path)
    assert {path.name for path in written} == {"bench-roles-scale.png",
                                              "bench-roles-scale-group.png"}


def test_a_group_s_outcome_counts_the_final_holders_and_the_tenures_they_superseded():
    members = ["group-1", "group-2", "group-3"]
    released, hold = 1_000.0, 9_000.0
    reports = [
        # group-1 took role 1 (tenure 40) after group-2's tenure of it; holds 0 and 1.
        {"held": [[0, 2_000.0, 10], [1, 5_000.0, 40]], "ended": []},
        # group-2's tenure of role 1 ended (superseded), as did its tenure of role 2
        # while holding, and nobody took role 2 again.
        {"held": [], "ended": [[1, 3_000.0, 12_000.0, "FencedError(...)"],
                               [2, 3_500.0, 10_000.0, "FencedError(...)"]]},
        # group-3 believes it holds role 0 still, but group-1's tenure 10 is the later one.
        {"held": [[0, 1_500.0, 5]], "ended": []},
    ]
    outcome = group_outcome(members, reports, 3, released, hold)
    assert outcome["split"] == {"group-1": 2, "group-2": 0, "group-3": 0}
    assert outcome["stale_at_end"] == 1
    assert outcome["acquire_s"] is None  # role 2 is not held at the end
    assert outcome["roles_unheld_at_end"] == 1
    assert outcome["tenures_superseded"] == 1
    assert outcome["tenures_ended_while_holding"] == 2
    assert outcome["roles_lost_while_holding"] == 1
    complete = group_outcome(members, reports, 2, released, hold)
    assert complete["acquire_s"] == 4.0  # the last holder's tenure began 4 s after release


def test_a_stopped_scale_run_says_whether_the_broker_still_runs_and_what_its_log_said(
        tmp_path):
    log = tmp_path / "kafka" / "node-1" / "server.log"
    log.parent.mkdir(parents=True)
    log.write_text("[INFO] started\n"
                   "[ERROR] Error while accepting connection (java.io.IOException: "
                   "Too many open files)\n")
    bench = SimpleNamespace(kafka_pids=[41, 42], folder=tmp_path)
    one_gone = SimpleNamespace(pid_exists=lambda pid: pid == 41)
    said = broker_state(bench, one_gone)  # type: ignore[arg-type]
    assert said.startswith("broker exited (running: [41] of [41, 42])")
    assert "Too many open files" in said
    assert "started" not in said
    all_up = SimpleNamespace(pid_exists=lambda pid: True)
    log.write_text("[INFO] started\n")
    assert broker_state(bench, all_up) == (  # type: ignore[arg-type]
        "broker running (pid [41, 42]); nothing of note in its log")


def test_a_worker_s_roles_allowed_are_one_a_descriptor_left_on_one_broker():
    assert limits.roles_allowed(20_000, 250) == 19_750
    assert limits.roles_allowed(200, 250) == 0


def test_the_gc_pauses_count_each_generation_s_collections_inside_the_block():
    with GcPauses() as pauses:
        gc.collect(0)
        gc.collect(2)
    gc.collect(2)
    summary = pauses.summary()
    assert summary["0"][0] >= 1
    assert summary["2"][0] == 1, "the collection after the block was counted"
    assert 0 <= summary["2"][1] <= summary["2"][2]


def test_the_summary_line_names_the_full_collections_and_the_younger_ones():
    line = gc_summary({"0": [80, 5.0, 200.0], "1": [7, 20.0, 100.0], "2": [2, 231.0, 400.0]})
    assert line == (", GC in the hold: 2 full collections (longest 231 ms, 400 ms in all), "
                    "younger ones 300 ms")
    assert gc_summary(None) == ""


def test_a_run_s_plots_replace_the_plots_an_earlier_run_left_in_the_folder(tmp_path):
    (tmp_path / "bench-crash-failover.png").write_bytes(b"an earlier run's")
    (tmp_path / "bench-roles-scale-uvloop.png").write_bytes(b"an earlier run's")
    (tmp_path / "notes.txt").write_text("not a plot")
    config = {"acquire_s": 1.0, "lease_s": 30.0, "renew_s": 10.0, "limit": "none",
              "acquisition_growth": growth({100: 1.0})}
    rows = [_row("roles-scale", f"{metric}@100", [100.0], config)
            for metric in ("rss", "fds", "cpu", "renewal-lateness")]
    plot_all(rows, tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["bench-roles-scale.png",
                                                                "notes.txt"]


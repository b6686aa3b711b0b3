"""Smoke test of `python -m bench`: a tiny subset runs and writes the JSON shape.

No timing is asserted. The peers are not needed (only krabka runs here, in both
fencing modes where a figure has them); the suite's broker is reused through
``--bootstrap-servers``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
KEYS = {"figure", "system", "unit", "n", "min", "p50", "p90", "p99", "max", "configuration"}


def test_codec_authority_check_and_fold_throughput_for_krabka_write_the_json_shape(
        kafka_bootstrap, tmp_path):
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "codec", "authority-check", "fold-throughput",
         "--systems", "krabka", "--fold-workloads", "contiguous",
         "--trials", "3", "--quick", "--bootstrap-servers", kafka_bootstrap,
         "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    print(done.stdout[-3000:])
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())
    figures = {(r["figure"], r["system"], r.get("metric")) for r in results}
    assert ("codec", "krabka", "encode") in figures
    assert ("codec", "krabka", "decode") in figures
    assert ("authority-check", "krabka", None) in figures
    assert ("fold-throughput", "krabka", "contiguous") in figures
    assert ("fold-throughput", "aiokafka-raw", "contiguous") in figures
    for result in results:
        assert set(result) >= KEYS, result
        assert result["n"] == len(result["samples"]) > 0
        assert result["min"] <= result["p50"] <= result["p90"] <= result["p99"] <= result["max"]
        assert result["configuration"]["lease_s"] == 3.0
    assert "ours/peer p50" in done.stdout
    meta = json.loads(out.with_suffix(".meta.json").read_text())
    assert meta["machine"]["nproc"]


def test_term_mode_runs_beside_epoch_mode_in_the_election_figures(kafka_bootstrap, tmp_path):
    """Both fencing modes through the same trials; term mode's zombie rows say what a
    TermFilter reader did with the paused leader's writes, and none passed after the
    successor's barrier."""
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "crash-failover", "zombie-in-flight",
         "--systems", "krabka", "--fencing", "epoch,term", "--trials", "1",
         "--bootstrap-servers", kafka_bootstrap, "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    print(done.stdout[-3000:])
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {(r["figure"], r["system"], r.get("metric")): r
            for r in json.loads(out.read_text())}
    for system, fencing in (("krabka", "epoch"), ("krabka-term", "term")):
        for figure, metric in (("crash-failover", None), ("crash-failover", "first-write"),
                               ("deadline-overshoot", None),
                               ("zombie-in-flight", "accepted"),
                               ("zombie-in-flight", "notice")):
            row = rows[(figure, system, metric)]
            assert row["n"] == 1, (figure, system, metric, row.get("extra"))
            assert row["configuration"]["fencing"] == fencing
    accepted = rows[("zombie-in-flight", "krabka-term", "accepted")]["samples"]
    dropped = rows[("zombie-in-flight", "krabka-term", "dropped")]["samples"]
    assert dropped[0] <= accepted[0]
    assert rows[("zombie-in-flight", "krabka-term", "passed-after-barrier")]["samples"] == [0.0]
    assert rows[("zombie-in-flight", "krabka", "accepted")]["samples"] == [0.0]
    assert ("zombie-in-flight", "krabka", "dropped") not in rows
    assert "term/row p50" in done.stdout
    meta = json.loads(out.with_suffix(".meta.json").read_text())
    assert meta["fencing"] == ["epoch", "term"]
    assert len(meta["load_average"]["before"]) == 3


def test_a_group_of_three_workers_holds_every_role_once_and_reports_the_split(
        kafka_bootstrap, tmp_path):
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "roles-scale-group", "--systems", "krabka",
         "--group-roles", "30", "--scale-hold", "2", "--bootstrap-servers", kafka_bootstrap,
         "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    print(done.stdout[-3000:])
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {r.get("metric"): r for r in json.loads(out.read_text())
            if r["figure"] == "roles-scale-group"}
    config = rows["acquire"]["configuration"]
    members = ["group-1", "group-2", "group-3"]
    assert config["members"] == members
    assert sum(config["split"].values()) == 30  # one holder per role, the highest tenure
    assert config["roles_unheld_at_end"] == 0
    assert sum(config["preferred_split"].values()) == 30
    for member in members:
        assert rows[f"held@{member}"]["samples"] == [float(config["split"][member])]
        assert rows[f"fds@{member}"]["n"] == 1
        assert rows[f"rss@{member}"]["n"] >= 1


def test_one_worker_holds_its_roles_on_each_event_loop_and_times_the_settle_apart(
        kafka_bootstrap, tmp_path):
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "roles-scale", "--systems", "krabka",
         "--scale-roles", "20", "--scale-hold", "2", "--scale-settle-quiet", "1",
         "--scale-loop", "asyncio,uvloop", "--bootstrap-servers", kafka_bootstrap,
         "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    print(done.stdout[-3000:])
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {(r["system"], r.get("metric")): r for r in json.loads(out.read_text())
            if r["figure"] == "roles-scale"}
    for system, loop in (("krabka", "asyncio"), ("krabka-uvloop", "uvloop")):
        config = rows[(system, "acquire@20")]["configuration"]
        assert config["loop"] == loop
        assert config["held"] == 20
        assert config["roles_lost_while_holding"] == 0
        assert config["settle_pause_ms"] >= 0
        assert config["settle_quiet_s"] == 1
        assert set(config["gc_pauses_acquiring_ms"]) == {"0", "1", "2"}
        assert (system, "renewal-lateness-after-settle@20") in rows
        assert (system, "renewal-lateness@20") in rows


def test_an_unknown_event_loop_is_refused_before_anything_runs(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "bench", "roles-scale", "--scale-loop", "trio",
         "--json", str(tmp_path / "bench.json")],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode != 0
    assert "--scale-loop must name one or more of asyncio, uvloop" in done.stderr
    assert not (tmp_path / "bench.json").exists()

"""`python -m bench` as a run: a figure that fails does not lose the figures measured
before it, and the run says which failed (in its output, its metadata and its exit
status)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import cli
from bench.plots import DOCS_FOLDER
from bench.stats import Result


def test_a_failing_figure_keeps_the_results_before_it_and_fails_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def runner(name: str) -> Any:
        async def measured(bench: Any) -> None:
            bench.add(Result("codec", "krabka", "records/s", [1.0, 2.0], {}, metric="encode"))
            raise RuntimeError("a broken figure")
        return measured

    monkeypatch.setattr(cli, "figure_runner", runner)
    out = tmp_path / "run.json"
    status = cli.main(["codec", "--systems", "krabka", "--json", str(out)])
    assert status == 1
    assert [(r["figure"], r["metric"]) for r in json.loads(out.read_text())] == [
        ("codec", "encode")]
    meta = json.loads(out.with_suffix(".meta.json").read_text())
    assert meta["failed"] == {"codec": "RuntimeError('a broken figure')"}
    assert "figure codec FAILED" in capsys.readouterr().out


async def test_warm_up_trials_run_first_untimed_and_their_failures_are_not_the_figures() -> None:
    from types import SimpleNamespace

    from bench.figures import alternate

    calls: list[tuple[str, int]] = []

    async def trial(system: str, i: int) -> None:
        calls.append((system, i))
        if i == -2 and system == "etcd":
            raise RuntimeError("a cold server")

    failures = await alternate(SimpleNamespace(trials=2), "graceful-handover",  # type: ignore[arg-type]
                               ["krabka", "etcd"], trial, warmup=2)
    assert calls == [("krabka", -2), ("etcd", -2), ("etcd", -1), ("krabka", -1),
                     ("krabka", 0), ("etcd", 0), ("etcd", 1), ("krabka", 1)]
    assert failures == {"krabka": [], "etcd": []}


def test_plots_alone_go_to_the_folder_the_benchmarks_doc_shows():
    assert cli.parser().parse_args(["codec", "--plots"]).plots == DOCS_FOLDER
    assert Path("docs/bench") == DOCS_FOLDER
    assert cli.parser().parse_args(["codec", "--plots", "elsewhere"]).plots == Path("elsewhere")
    assert cli.parser().parse_args(["codec"]).plots is None


def test_graceful_handover_runs_first_of_the_figures_that_use_the_servers():
    server_figures = [f for f in cli.FIGURES if f in cli.NEEDS_KAFKA | cli.WITH_PEERS]
    assert server_figures[0] == "graceful-handover"


def test_kafka_fsync_flushes_every_write_to_the_state_and_terms_topics_and_is_recorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.context import Bench

    created: dict[str, bool] = {}

    async def create_topic(self: Bench, name: str, partitions: int, *, compact: bool = False,
                           log_append_time: bool = False, fsync: bool = False) -> None:
        created[name] = fsync

    def runner(name: str) -> Any:
        async def measured(bench: Any) -> None:
            bench.add(Result(name, "krabka", "ms", [1.0], bench.config()))
        return measured

    monkeypatch.setattr(Bench, "create_topic", create_topic)
    monkeypatch.setattr(cli, "figure_runner", runner)
    out = tmp_path / "run.json"
    assert cli.main(["crash-failover", "--systems", "krabka", "--durability", "kafka-fsync",
                     "--bootstrap-servers", "127.0.0.1:1", "--json", str(out)]) == 0
    assert sorted(created.values()) == [True, True]  # the state topic and the terms topic
    assert json.loads(out.read_text())[0]["configuration"]["durability"] == "kafka-fsync"
    meta = json.loads(out.with_suffix(".meta.json").read_text())
    assert meta["durability"]["setting"] == "kafka-fsync"


def test_a_negative_count_of_cold_rounds_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="--cold must not be negative"):
        cli.main(["codec", "--systems", "krabka", "--cold", "-1"])

"""The Grafana dashboard in deploy/grafana queries only figures a worker exports,
and shows every coordination figure.

The exported names come from rendering a built worker's registry after one
event of each kind, so the list lives only in `app.metrics` (and in Faust's
sensor): a renamed metric turns this test red instead of leaving an empty panel.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from faust.types import TP
from prometheus_client.parser import text_string_to_metric_families

from app.factory import build
from app.settings import Settings
from coordination import MemoryTransport

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / \
    "krabka-coordination.json"

# PromQL words that are not metric names where the dashboard's expressions use them.
KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "bool",
                      "and", "or", "unless", "offset"})
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGES = re.compile(r"\[[^\]]*\]")
_GROUPINGS = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_NAME = re.compile(r"(?<![\w.$])([a-zA-Z_:][\w:]*)(\s*\()?")


def metric_names(expr: str) -> set[str]:
    """The metric names an expression of the dashboard's (simple) PromQL selects."""
    for pattern in (_STRINGS, _MATCHERS, _RANGES, _GROUPINGS):
        expr = pattern.sub(" ", expr)
    return {m.group(1) for m in _NAME.finditer(expr)
            if m.group(2) is None and m.group(1) not in KEYWORDS}


def test_metric_names_are_read_out_of_promql():
    expr = ('histogram_quantile(0.99, sum by (le, role) (rate(a_bucket{instance=~"$i"}'
            '[$__rate_interval]))) - on (topic) b_total offset 5m')
    assert metric_names(expr) == {"a_bucket", "b_total"}
    assert metric_names('label_values(c, instance)') == {"c", "instance"}


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def expressions(board: dict[str, Any]) -> list[str]:
    exprs = [target["expr"] for panel in board["panels"] for target in panel.get("targets", [])]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            query = re.fullmatch(r"label_values\((\w+),\s*\w+\)", variable["query"]["query"])
            assert query, variable
            exprs.append(query.group(1))
    return exprs


def exported_names() -> set[str]:
    """Every sample name a worker's /metrics shows once each figure has been recorded."""
    ctx = build(Settings(partitions=4, app_id="test-dashboard", member_id="m"),
                store="memory://", roles={}, transport_factory=MemoryTransport)
    metrics = ctx.metrics
    metrics.standing("r")
    metrics.leading("r", True)
    metrics.lease_written("r", 0.01)
    metrics.fenced("r")
    metrics.resigned("r")
    metrics.lost("r", "fenced")
    metrics.handed_over()
    metrics.event("elected")
    metrics.skip(0, "malformed")
    # The fold lag's own source needs an assignment; any source shows the family.
    metrics.follow_fold_lag(lambda: {0: 1})
    monitor = ctx.app.monitor
    tp = TP("t", 0)
    monitor.track_tp_end_offset(tp, 2)
    monitor.on_tp_commit({tp: 1})
    body, _ = metrics.render()
    return {sample.name for family in text_string_to_metric_families(body.decode())
            for sample in family.samples}


def test_the_dashboard_queries_only_exported_metrics():
    exported = exported_names()
    used = set().union(*(metric_names(expr) for expr in expressions(dashboard())))
    assert used, "no metric names found in the dashboard"
    assert used - exported == set()


def test_the_dashboard_shows_every_coordination_figure():
    exported = {name for name in exported_names() if name.startswith("coordination_")
                and not name.endswith("_created")}
    used = set().union(*(metric_names(expr) for expr in expressions(dashboard())))
    histograms = {name.removesuffix("_bucket") for name in used if name.endswith("_bucket")}
    shown = used | {f"{h}_{part}" for h in histograms for part in ("count", "sum")}
    assert exported - shown == set()


def test_the_dashboard_is_well_formed():
    board = dashboard()
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in board["templating"]["list"]}
    assert {"datasource", "instance"} <= variables
    for panel in board["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["expr"].count("(") == target["expr"].count(")"), target["expr"]

"""The Grafana dashboard in deploy/grafana queries only figures a worker exports,
in either cardinality of its role figures, and shows every coordination figure.

The exported names and labels come from rendering a built worker's registry
after one event of each kind, so the list lives only in `app.metrics` (and in
Faust's sensor): a renamed metric turns this test red instead of leaving an
empty panel. A panel that needs the role label where only the per-role
cardinality has it says so first in its description (`PER_ROLE_ONLY`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from faust.types import TP
from prometheus_client.parser import text_string_to_metric_families

from app.factory import build
from app.metrics import Cardinality
from app.settings import Settings
from krabka.testing import MemoryTransport

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
_GROUPING_LABELS = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_MATCHER_LABELS = re.compile(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)")
_LEGEND_LABELS = re.compile(r"\{\{\s*(\w+)\s*\}\}")

PER_ROLE_ONLY = "Per-role mode only:"
"""How a panel's description begins when it reads the role label of a role figure
that the low-cardinality mode exports without it."""
TARGET_LABELS = frozenset({"instance", "job"})
"""Labels Prometheus adds to every scraped series."""


def metric_names(expr: str) -> set[str]:
    """The metric names an expression of the dashboard's (simple) PromQL selects."""
    for pattern in (_STRINGS, _MATCHERS, _RANGES, _GROUPINGS):
        expr = pattern.sub(" ", expr)
    return {m.group(1) for m in _NAME.finditer(expr)
            if m.group(2) is None and m.group(1) not in KEYWORDS}


def label_names(expr: str, legend: str = "") -> set[str]:
    """The labels an expression groups, joins or matches on, or its legend shows."""
    expr = _STRINGS.sub('""', expr)
    grouped = {label.strip() for group in _GROUPING_LABELS.findall(expr)
               for label in group.split(",") if label.strip()}
    matched = {label for matchers in _MATCHERS.findall(expr)
               for label in _MATCHER_LABELS.findall(matchers)}
    return grouped | matched | set(_LEGEND_LABELS.findall(legend))


def test_metric_names_are_read_out_of_promql():
    expr = ('histogram_quantile(0.99, sum by (le, role) (rate(a_bucket{instance=~"$i"}'
            '[$__rate_interval]))) - on (topic) b_total offset 5m')
    assert metric_names(expr) == {"a_bucket", "b_total"}
    assert metric_names('label_values(c, instance)') == {"c", "instance"}
    assert label_names(expr, "{{kind}} p99") == {"le", "role", "instance", "topic", "kind"}
    assert label_names('sum(a{role!="", x="by (y)"})') == {"role", "x"}


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


def panel_targets(board: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(panel, target) for panel in board["panels"] for target in panel.get("targets", [])]


def exported_names(cardinality: Cardinality = Cardinality.PER_ROLE) -> set[str]:
    """Every sample name a worker's /metrics shows once each figure has been recorded."""
    return set(exported_labels(cardinality))


def exported_labels(cardinality: Cardinality) -> dict[str, set[str]]:
    """Every sample name a worker's /metrics shows in `cardinality` once each figure
    has been recorded, with the labels its samples carry."""
    ctx = build(Settings(partitions=4, app_id="test-dashboard", member_id="m"),
                store="memory://", roles={}, transport_factory=MemoryTransport)
    metrics = ctx.metrics
    metrics.stand_for(["r"], per_role_limit=1 if cardinality is Cardinality.PER_ROLE else 0)
    assert metrics.cardinality is cardinality
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
    labels: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            labels.setdefault(sample.name, set()).update(sample.labels)
    return labels


@pytest.mark.parametrize("cardinality", list(Cardinality))
def test_the_dashboard_queries_only_exported_metrics(cardinality):
    exported = exported_names(cardinality)
    used = set().union(*(metric_names(expr) for expr in expressions(dashboard())))
    assert used, "no metric names found in the dashboard"
    assert used - exported == set()


def test_only_panels_marked_per_role_read_labels_the_low_cardinality_mode_drops():
    """Every other panel shows the same figures in either mode: its metrics carry
    the labels it groups, matches or names in a legend in the low-cardinality
    mode too. A marked panel does need one of those labels (or the mark is
    stale)."""
    per_role = exported_labels(Cardinality.PER_ROLE)
    low = exported_labels(Cardinality.LOW)
    needs_per_role: dict[str, bool] = {}
    for panel, target in panel_targets(dashboard()):
        names = metric_names(target["expr"])
        labels = label_names(target["expr"], target.get("legendFormat", "")) - TARGET_LABELS
        known = set().union(*(per_role[name] for name in names))
        assert labels <= known, (panel["title"], labels - known)
        in_low = set().union(*(low[name] for name in names))
        needs = bool(labels - in_low)
        needs_per_role[panel["title"]] = needs_per_role.get(panel["title"], False) or needs
        marked = panel["description"].startswith(PER_ROLE_ONLY)
        assert marked or not needs, (panel["title"], target["expr"], labels - in_low)
    marked = {panel["title"] for panel in dashboard()["panels"]
              if panel.get("description", "").startswith(PER_ROLE_ONLY)}
    assert marked, "no per-role panel: the check above would pass unexercised"
    assert all(needs_per_role[title] for title in marked)


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

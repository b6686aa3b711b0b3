"""The alerts the repository ships (deploy/prometheus, deploy/k8s/monitoring),
checked with Prometheus's own promtool: the rules parse, the example scrape
configuration loads them, each alert fires on the series its unit tests feed
and stays quiet where it must, and a broken rule or a broken alert test is
reported. Then what promtool cannot know: every series an alert reads is one
the worker exports, the thresholds follow the shipped settings, and the
ServiceMonitor scrapes each worker once under the job the alerts name."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.metrics import RENEWAL_BUCKETS, Metrics
from deploy import validate
from krabka import defaults
from tests.app.test_app_deploy import k8s_objects, load_all, served_paths

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = ROOT / "deploy" / "prometheus"
MONITORING = ROOT / "deploy" / "k8s" / "monitoring"
JOB = "krabka-workers"


def alerts() -> dict[str, dict[str, Any]]:
    (group,) = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())["groups"]
    return {rule["alert"]: rule for rule in group["rules"]}


def seconds(duration: str) -> float:
    """A Prometheus duration of one unit (``30s``, ``1m``, ``5m``) in seconds."""
    match = re.fullmatch(r"(\d+)([smh])", duration)
    assert match, duration
    return int(match.group(1)) * {"s": 1, "m": 60, "h": 3600}[match.group(2)]


def broken_copy(tmp_path: Path, name: str, original: str, broken: str) -> Path:
    """deploy/prometheus copied to `tmp_path`, with `original` in `name` replaced."""
    copy = tmp_path / "prometheus"
    shutil.copytree(PROMETHEUS, copy)
    path = copy / name
    text = path.read_text()
    assert original in text, (name, original)
    path.write_text(text.replace(original, broken, 1))
    return copy


# --- promtool on the shipped files and on broken copies -------------------------------

def test_the_alerts_pass_promtool_check_and_their_unit_tests():
    assert validate.prometheus_problems() == []


def test_every_alert_has_a_unit_test_that_expects_it_to_fire():
    tests = yaml.safe_load((PROMETHEUS / "alerts.test.yml").read_text())["tests"]
    fired = {case["alertname"] for test in tests for case in test["alert_rule_test"]
             if case.get("exp_alerts")}
    quiet = {case["alertname"] for test in tests for case in test["alert_rule_test"]
             if not case.get("exp_alerts")}
    assert fired == quiet == set(alerts())


def test_a_rule_with_a_bad_expression_is_reported(tmp_path):
    copy = broken_copy(tmp_path, "alerts.yml", "sum by (role) (coordination_roles_held) == 0",
                       "sum by (role) (coordination_roles_held == 0")
    problems = validate.prometheus_problems(copy, MONITORING / "prometheusrule.yaml")
    assert any(p.startswith("promtool check rules alerts.yml: ") for p in problems), problems
    assert any("parse error" in p for p in problems), problems


def test_an_alert_test_expecting_a_firing_that_cannot_happen_is_reported(tmp_path):
    # Five minutes of a worker not ready for 75 s: KrabkaWorkerNotReady stays quiet.
    copy = broken_copy(tmp_path, "alerts.test.yml",
                       "      - eval_time: 2m\n        alertname: KrabkaWorkerNotReady\n",
                       "      - eval_time: 2m\n        alertname: KrabkaWorkerNotReady\n"
                       "        exp_alerts:\n"
                       "          - exp_labels: {severity: warning, job: krabka-workers,"
                       " instance: w2}\n")
    problems = validate.prometheus_problems(copy, MONITORING / "prometheusrule.yaml")
    assert problems
    assert all(p.startswith("promtool test rules alerts.test.yml: ") for p in problems), problems
    assert any("KrabkaWorkerNotReady" in p for p in problems), problems


def test_a_prometheus_rule_that_drifts_from_the_alerts_is_reported(tmp_path):
    rule = tmp_path / "prometheusrule.yaml"
    rule.write_text((MONITORING / "prometheusrule.yaml").read_text().replace("for: 30s",
                                                                             "for: 5m", 1))
    problems = validate.prometheus_problems(PROMETHEUS, rule)
    assert problems == [f"{rule.name}: does not hold the groups of alerts.yml; "
                        "`python deploy/validate.py --write-prometheus-rule` rewrites it"]


def test_a_missing_promtool_is_an_error_that_says_how_to_fetch_it(tmp_path, monkeypatch):
    # A gate that cannot run must fail, not pass or skip.
    monkeypatch.setenv("PROMTOOL", str(tmp_path / "promtool"))
    with pytest.raises(validate.ToolMissing, match=r"promtool is not at .*make promtool"):
        validate.prometheus_problems()


# --- what promtool cannot know ----------------------------------------------------------

def exported_names() -> set[str]:
    """Every sample name a worker's registry exports (with a source for each scraped gauge)."""
    metrics = Metrics()
    metrics.stand_for(["billing"], per_role_limit=10)
    metrics.leading("billing", True)
    metrics.lease_written("billing", 0.01)
    metrics.follow_fold_lag(lambda: {0: 1})
    metrics.follow_readiness(lambda: True)
    return {sample.name for family in metrics.registry.collect() for sample in family.samples}


def test_every_series_an_alert_reads_is_one_the_worker_exports():
    exported = exported_names() | {"up"}  # `up`: Prometheus's own, per target
    for name, rule in alerts().items():
        read = set(re.findall(r"\bcoordination_\w+|\bup(?=\{)", rule["expr"]))
        assert read, name
        assert read <= exported, (name, read - exported)


def test_the_thresholds_follow_the_shipped_settings():
    config = k8s_objects()[("ConfigMap", "krabka-coordination")]["data"]
    lease, renew = float(config["COORDINATION_LEASE_DURATION"]), float(
        config["COORDINATION_RENEW_INTERVAL"])
    assert (lease, renew) == (defaults.LEASE_DURATION, defaults.RENEW_INTERVAL)
    scrape = seconds(yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
                     ["global"]["scrape_interval"])
    (monitor,) = load_all(MONITORING / "servicemonitor.yaml")
    assert {seconds(e["interval"]) for e in monitor["spec"]["endpoints"]} == {scrape}
    rules = alerts()
    # A failover leaves a role vacant for at most a lease, seen up to a scrape late.
    assert seconds(rules["KrabkaRoleVacant"]["for"]) >= lease + scrape
    # A handover can show two holders for one scrape interval.
    assert seconds(rules["KrabkaRoleHeldTwice"]["for"]) > scrape
    # Slow means over the renew interval: a bucket bound of the histogram.
    (bound,) = re.findall(r'le=~"(\d+)\(', rules["KrabkaLeaseWritesSlow"]["expr"])
    assert float(bound) == renew
    assert renew in RENEWAL_BUCKETS


def test_the_service_monitor_scrapes_each_worker_once_under_the_job_the_alerts_name():
    (monitor,) = load_all(MONITORING / "servicemonitor.yaml")
    selector = monitor["spec"]["selector"]["matchLabels"]
    services = [name for (kind, name), obj in k8s_objects().items()
                if kind == "Service" and selector.items() <= obj["metadata"]["labels"].items()]
    assert services == [JOB]  # the headless Service only: krabka-web fronts the same pods
    service = k8s_objects()[("Service", JOB)]["spec"]
    assert service["publishNotReadyAddresses"] is True  # not-ready workers are scraped too
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {port["name"] for port in service["ports"]}
    assert endpoint["path"] in served_paths()
    assert "jobLabel" not in monitor["spec"]  # the job is then the Service's name
    (scrape,) = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())["scrape_configs"]
    assert scrape["job_name"] == JOB
    assert f'up{{job="{JOB}"}}' in alerts()["KrabkaWorkerDown"]["expr"]


def test_the_monitoring_manifests_are_the_ones_its_kustomization_applies():
    listed = {p.name for p in validate.kustomization_resources(MONITORING)}
    present = {p.name for p in MONITORING.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present
    kinds = {doc["kind"] for name in listed for doc in load_all(MONITORING / name)}
    assert kinds == {"ServiceMonitor", "PrometheusRule"}

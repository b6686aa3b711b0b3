"""The worker group, the operator CLI and the topics tool on a SASL_SSL broker with ACLs.

The broker (the `secure_kafka` fixture) speaks only SASL_SSL (SCRAM-SHA-512,
TLS from keytool) and runs Kafka's StandardAuthorizer. The topics are
created as the super user ``admin``; the workers run as ``worker``, granted
exactly `app.access.worker_acls` and nothing more. The principal
``limited`` holds the same ACLs less one, in turn: the start-up check names
the one it lacks, and a worker started as it stops at start-up saying so.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.access import worker_acls
from app.settings import Settings
from krabka.kafka.access import AccessDeniedError, Acl, check_access
from tests.app.test_app_harness import AppGroup, poll
from tests.support.cli_run import STATUS, run_once
from tests.support.ports import free_port
from tests.support.secure_cluster import SecureCluster

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DEMO = "demo"
START = 120  # a worker's start-up, group join and first election
REFUSED = 60  # a worker lacking an ACL exits by then
PROPAGATION = 15  # an ACL change reaches the broker's authorizer


def _acls(group: AppGroup) -> list[Acl]:
    settings = Settings.from_env(group.env(free_port()))
    return worker_acls(settings, [DEMO], [group.demo_topic])


@pytest.fixture(scope="module")
def group(secure_kafka: SecureCluster, tmp_path_factory: pytest.TempPathFactory):
    group = AppGroup(secure_kafka.bootstrap, tmp_path_factory.mktemp("secure-group"),
                     partitions=2, extra_env=secure_kafka.env("worker"))
    created = group.create_topics(env=secure_kafka.env("admin"))
    assert set(json.loads(created.stdout).values()) == {"created"}, created.stdout
    secure_kafka.grant("worker", _acls(group))
    try:
        for _ in range(2):
            group.start()
        yield group
    finally:
        group.stop_all()


def _cli(group: AppGroup, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "krabka", *args, "--topic", group.state_topic],
        env={**group.env(free_port()), **env}, cwd=ROOT, capture_output=True, text=True,
        timeout=60, check=False)


def test_a_worker_group_elects_over_sasl_ssl_and_the_cli_describes_the_role(
        group: AppGroup, secure_kafka: SecureCluster):
    members = {worker.member for worker in group.workers}

    def holder() -> str | None:
        done = _cli(group, "state", DEMO, "--partitions", str(group.partitions),
                    env=secure_kafka.env("worker"))
        assert done.returncode == 0, done.stderr
        lease = json.loads(done.stdout).get("lease") or {}
        return lease.get("member") if lease.get("member") in members else None

    poll(holder, START, "a worker of the group holding the demo role, read by the CLI")
    described = _cli(group, "describe", DEMO, env=secure_kafka.env("worker"))
    assert described.returncode == 0, described.stderr
    token = json.loads(described.stdout)["token"]
    assert token is not None, described.stdout
    assert token["producer_epoch"] >= 0
    assert all(worker.alive() for worker in group.workers)


def test_the_topics_tool_is_refused_without_create_on_the_topics(
        group: AppGroup, secure_kafka: SecureCluster):
    refused = group.create_topics(env=secure_kafka.env("worker"), check=False)
    assert refused.returncode == 1, (refused.stdout, refused.stderr)
    assert f"lacks the ACL(s) Topic `{group.state_topic}`: Create" in refused.stderr


@pytest.fixture(scope="module")
def limited(group: AppGroup, secure_kafka: SecureCluster) -> list[Acl]:
    acls = _acls(group)
    secure_kafka.grant("limited", acls)
    return acls


def _missing(group: AppGroup, secure_kafka: SecureCluster, acls: list[Acl]
             ) -> tuple[Acl, ...]:
    connection = secure_kafka.connection("limited")
    try:
        asyncio.run(check_access(secure_kafka.bootstrap, acls, topic=group.state_topic,
                                 principal="limited", **connection.client_options()))
    except AccessDeniedError as exc:
        return exc.missing
    return ()


def test_a_principal_with_every_acl_passes_the_check(
        group: AppGroup, secure_kafka: SecureCluster, limited: list[Acl]):
    poll(lambda: _missing(group, secure_kafka, limited) == (), PROPAGATION,
         "the check passing with every ACL granted")


def test_the_check_names_each_missing_acl(group: AppGroup, secure_kafka: SecureCluster,
                                          limited: list[Acl]):
    # One principal, one ACL revoked at a time (a test per ACL would cost a
    # broker round trip of setup each; the assertion names the ACL that failed).
    for acl in limited:
        secure_kafka.revoke("limited", [acl])
        try:
            poll(lambda acl=acl: _missing(group, secure_kafka, limited) == (acl,),
                 PROPAGATION, f"the check naming exactly {acl}")
        finally:
            secure_kafka.grant("limited", [acl])


def test_a_worker_lacking_an_acl_stops_at_start_up_naming_it(
        group: AppGroup, secure_kafka: SecureCluster, limited: list[Acl]):
    lacking = Acl("Group", group.app_id, "Read")
    assert lacking in limited
    secure_kafka.revoke("limited", [lacking])
    try:
        poll(lambda: _missing(group, secure_kafka, limited) == (lacking,), PROPAGATION,
             f"the broker refusing {lacking}")
        worker = group.start(env=secure_kafka.env("limited"))
        status = worker.process.wait(REFUSED)
    finally:
        secure_kafka.grant("limited", [lacking])
    log = worker.log.read_text(errors="replace")
    assert status != 0, log[-3000:]
    assert f"lacks the ACL(s) {lacking}" in log, log[-3000:]


def test_krabka_run_leads_a_role_and_runs_its_command_over_sasl_ssl(
        group: AppGroup, secure_kafka: SecureCluster):
    done = run_once({**group.env(free_port()), **secure_kafka.env("admin")}, "secure.run",
                    "--topic", group.state_topic, "--partitions", str(group.partitions))
    assert done.returncode == STATUS, done.stderr
    role, fencing, token = done.stdout.split()
    assert (role, fencing) == ("secure.run", "epoch")
    assert [int(part) >= 0 for part in token.split(":")] == [True, True]

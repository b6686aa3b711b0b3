"""A term-mode worker group whose principal has no TransactionalId ACL at all.

The broker (the `secure_kafka` fixture) speaks only SASL_SSL and runs Kafka's
StandardAuthorizer. The principal ``term`` is granted exactly what
`app.access.worker_acls` lists for ``COORDINATION_FENCING=term``, which names
no TransactionalId: two workers pass the start-up access check, elect a
leader for the demo role and hand it over when the leader stops. The same
principal lacks what an epoch-mode worker needs, and the check says so.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from app.access import worker_acls
from app.settings import Settings
from krabka.kafka.access import AccessDeniedError, check_access
from tests.app.test_app_harness import AppGroup, AppWorker, poll
from tests.support.cli_run import STATUS, run_once
from tests.support.ports import free_port
from tests.support.secure_cluster import SecureCluster

pytestmark = pytest.mark.integration

USER = "term"
DEMO = "demo"
START = 120  # a worker's start-up, group join and first election
HANDOVER = 60


def _settings(group: AppGroup, fencing: str) -> Settings:
    return Settings.from_env(group.env(free_port(), COORDINATION_FENCING=fencing))


@pytest.fixture(scope="module")
def group(secure_kafka: SecureCluster, tmp_path_factory: pytest.TempPathFactory):
    group = AppGroup(secure_kafka.bootstrap, tmp_path_factory.mktemp("term-secure"),
                     partitions=2,
                     extra_env={**secure_kafka.env(USER), "COORDINATION_FENCING": "term"})
    created = group.create_topics(env=secure_kafka.env("admin"))
    assert set(json.loads(created.stdout).values()) == {"created"}, created.stdout
    acls = worker_acls(_settings(group, "term"), [DEMO], [group.demo_topic])
    assert [acl for acl in acls if acl.resource == "TransactionalId"] == []
    secure_kafka.grant(USER, acls)
    try:
        yield group
    finally:
        group.stop_all()


def _held(worker: AppWorker, not_by: str | None = None) -> dict[str, Any] | None:
    status, body = worker.get(f"/roles/{DEMO}/")
    if status == 200 and body["status"] == "held" and body["holder"] != not_by:
        return body  # type: ignore[no-any-return]
    return None


def test_an_epoch_mode_worker_of_this_principal_would_be_refused_for_its_transactional_ids(
        group: AppGroup, secure_kafka: SecureCluster):
    connection = secure_kafka.connection(USER)
    epoch = worker_acls(_settings(group, "epoch"), [DEMO], [group.demo_topic])

    def refused() -> tuple[Any, ...] | None:
        try:
            asyncio.run(check_access(secure_kafka.bootstrap, epoch, topic=group.state_topic,
                                     principal=USER, **connection.client_options()))
        except AccessDeniedError as exc:
            return exc.missing
        return None

    missing = poll(refused, 30, "the epoch-mode check refusing the principal")
    assert {acl.resource for acl in missing} == {"TransactionalId"}
    assert {acl.name for acl in missing} == {DEMO, f"{group.app_id}-"}


def test_a_term_mode_group_runs_elects_and_hands_over_without_transactional_id_acls(
        group: AppGroup):
    for _ in range(2):
        group.start()
    for worker in group.workers:
        poll(worker.health, START, f"worker {worker.port} serving (its access check passed)")
    members = {worker.member for worker in group.workers}
    first = poll(lambda: _held(group.workers[0]), START, "a holder of the demo role")
    assert first["fencing"] == "term"
    assert first["holder"] in members
    assert first["term"] >= 1
    leader = next(w for w in group.workers if w.member == first["holder"])
    standby = next(w for w in group.workers if w is not leader)
    poll(lambda: (_held(standby) or {}).get("members") == 2, START,
         "both workers registered for the demo role")

    leader.stop()  # SIGTERM: the role service resigns before the worker exits
    try:
        second = poll(lambda: _held(standby, not_by=leader.member), HANDOVER,
                      "the standby holding the demo role in a higher term", interval=0.5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the standby answers {standby.get(f'/roles/{DEMO}/')}; "
                             f"the leader exited with {leader.process.returncode}") from None
    assert second["holder"] == standby.member
    assert second["term"] > first["term"]
    assert standby.alive()
    log = standby.log.read_text(errors="replace")
    assert "lacks the ACL" not in log
    assert "TransactionalIdAuthorizationFailed" not in log
    assert "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" not in log


def test_krabka_run_leads_a_term_mode_role_over_sasl_ssl_without_transactional_id_acls(
        group: AppGroup, secure_kafka: SecureCluster):
    done = run_once({**group.env(free_port()), **secure_kafka.env(USER)}, "secure.term-run",
                    "--fencing", "term", "--topic", group.state_topic,
                    "--terms-topic", group.terms_topic, "--partitions", str(group.partitions))
    assert done.returncode == STATUS, done.stderr
    role, fencing, term = done.stdout.split()
    assert (role, fencing) == ("secure.term-run", "term")
    assert int(term) >= 1

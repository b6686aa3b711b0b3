"""The worker's ACLs and its start-up check, without a broker (the authorizer's
answers are tested in tests/app/test_app_secure.py)."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

from app.access import check, worker_acls
from app.settings import Settings
from krabka.kafka.access import Acl
from tests.support.ports import free_port


def test_a_worker_needs_its_member_acls_and_faust_s_group_topics_and_transactions():
    settings = Settings.from_env({"COORDINATION_APP_ID": "app",
                                  "COORDINATION_EVENTS_TOPIC": "events"})
    acls = worker_acls(settings, ["demo"], ["out"])
    assert Acl("TransactionalId", "demo", "Write") in acls
    assert Acl("Topic", "out", "Write") in acls
    assert Acl("Group", "app", "Read") in acls
    assert Acl("Topic", "events", "Read") in acls
    assert {acl for acl in acls if acl.prefixed} == {
        Acl("Topic", "app-", "Create", prefixed=True),
        Acl("Topic", "app-", "Read", prefixed=True),
        Acl("Topic", "app-", "Write", prefixed=True),
        Acl("TransactionalId", "app-", "Write", prefixed=True)}
    assert len(set(acls)) == len(acls)


def test_an_unreachable_cluster_leaves_the_acls_unchecked_and_says_so(caplog):
    port = free_port()  # nothing listens on it
    settings = Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{port}"})
    with caplog.at_level(logging.WARNING, logger="app.access"):
        asyncio.run(check(SimpleNamespace(settings=settings, roles={}, outputs={})))
    assert "the ACLs could not be checked at start-up" in caplog.text


def test_a_term_mode_worker_needs_no_transactional_id_acl_at_all():
    settings = Settings.from_env({"COORDINATION_APP_ID": "app", "COORDINATION_FENCING": "term",
                                  "COORDINATION_TERMS_TOPIC": "terms"})
    acls = worker_acls(settings, ["demo"], ["out"])
    assert [acl for acl in acls if acl.resource == "TransactionalId"] == []
    assert {Acl("Topic", "terms", op) for op in ("Read", "Write", "DescribeConfigs")} <= set(acls)
    assert Acl("Topic", "out", "Write") in acls
    assert Acl("Group", "app", "Read") in acls
    assert len(set(acls)) == len(acls)


def test_an_epoch_mode_worker_is_not_asked_for_the_terms_topic():
    acls = worker_acls(Settings.from_env({}), ["demo"])
    assert not [acl for acl in acls if acl.name == "__coordination_terms"]

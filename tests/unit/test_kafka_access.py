"""The ACLs a member needs, how a missing one is named, and which checks exist (no broker:
tests/app/test_app_secure.py asks the real authorizer)."""

from __future__ import annotations

import pytest

from krabka.errors import CoordinationError, TransportError
from krabka.kafka.access import CLUSTER, AccessDeniedError, Acl, member_acls


def test_an_acl_reads_as_docs_guarantees_writes_it():
    assert str(Acl("Topic", "__coordination_state", "Write")) == (
        "Topic `__coordination_state`: Write")
    assert str(Acl("TransactionalId", "acme.", "Write", prefixed=True)) == (
        "TransactionalId prefix `acme.`: Write")


def test_a_prefixed_acl_is_checked_for_a_name_under_the_prefix():
    assert Acl("Topic", "app-", "Create", prefixed=True).probe_name.startswith("app-")
    assert Acl("Topic", "t", "Read").probe_name == "t"


@pytest.mark.parametrize(("resource", "operation"), [
    ("Topic", "Alter"), ("Topic", "IdempotentWrite"), ("Group", "Write"), ("Queue", "Read")])
def test_an_acl_without_a_check_is_refused(resource, operation):
    with pytest.raises(ValueError, match=resource if resource == "Queue" else operation):
        Acl(resource, "x", operation)


def test_a_member_needs_the_state_topic_its_roles_and_the_cluster_configs():
    acls = member_acls("__coordination_state", ["b", "a", "a"], guarded_topics=["out"])
    assert [str(acl) for acl in acls] == [
        "Topic `__coordination_state`: Read",
        "Topic `__coordination_state`: Write",
        "Topic `__coordination_state`: DescribeConfigs",
        "TransactionalId `a`: Write",
        "TransactionalId `b`: Write",
        "Topic `out`: Write",
        f"Cluster `{CLUSTER}`: DescribeConfigs",
    ]
    prefixed = member_acls("s", [], role_prefix="acme.")
    assert Acl("TransactionalId", "acme.", "Write", prefixed=True) in prefixed


def test_a_term_mode_member_needs_the_configs_of_its_outputs_and_no_transactional_id():
    acls = member_acls("s", ["a"], guarded_topics=["out"], fencing="term", terms_topic="t")
    assert [str(acl) for acl in acls] == [
        "Topic `s`: Read",
        "Topic `s`: Write",
        "Topic `s`: DescribeConfigs",
        "Topic `t`: Read",
        "Topic `t`: Write",
        "Topic `t`: DescribeConfigs",
        "Topic `out`: Write",
        "Topic `out`: DescribeConfigs",
        f"Cluster `{CLUSTER}`: DescribeConfigs",
    ]


def test_a_missing_acl_is_a_coordination_error_that_is_not_retried():
    error = AccessDeniedError("worker", [Acl("Group", "app", "Read"),
                                         Acl("Topic", "t", "Write")])
    assert isinstance(error, CoordinationError)
    assert not isinstance(error, TransportError)
    assert str(error) == ("principal 'worker' lacks the ACL(s) Group `app`: Read; "
                          "Topic `t`: Write (docs/guarantees.md#acls-a-member-needs)")

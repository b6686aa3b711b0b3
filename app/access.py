"""The ACLs a worker needs, and the start-up check that its principal holds them.

A worker is a coordination member (docs/guarantees.md#acls-a-member-needs)
and a Faust app: Faust consumes the state and events topics in the consumer
group named by the app id, creates and uses its own topics (table
changelogs, the ticks topic, its assignor's leader topic), all named
``{app id}-...``, and commits each partition's fold in transactions whose ids
start with the app id too (in epoch mode; a term-mode worker has no
transactions). `worker_acls` lists all of them; docs/deploy.md shows them as
``kafka-acls`` commands.

Without the check, a principal that lacks one fails late and obscurely (a
Faust rebalance loop, a role that never leads). With it, the worker stops at
start-up with `krabka.kafka.AccessDeniedError` naming every missing ACL.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from app.context import Context
from app.settings import Settings
from krabka.kafka.access import Acl, check_access, member_acls
from krabka.kafka.errors import KafkaUnavailableError

__all__ = ["check", "install", "worker_acls"]

log = logging.getLogger("app.access")


def worker_acls(settings: Settings, roles: Iterable[str],
                guarded_topics: Iterable[str] = ()) -> list[Acl]:
    """Every ACL a worker with `settings` standing for `roles` needs.

    `guarded_topics` are the roles' declared outputs. In term mode
    (``COORDINATION_FENCING=term``) there is no TransactionalId ACL at all:
    the roles claim terms on the terms topic through a plain producer, and
    Faust runs at_least_once, without its per-partition transactions.
    """
    faust_prefix = f"{settings.app_id}-"
    acls = [
        *member_acls(settings.state_topic, roles, guarded_topics=guarded_topics,
                     fencing=settings.fencing, terms_topic=settings.terms_topic),
        *(Acl("Topic", settings.events_topic, op) for op in ("Read", "Write")),
        Acl("Group", settings.app_id, "Read"),
        *(Acl("Topic", faust_prefix, op, prefixed=True) for op in ("Create", "Read", "Write")),
    ]
    if not settings.term_mode:
        acls.append(Acl("TransactionalId", faust_prefix, "Write", prefixed=True))
    return acls


def _guarded_topics(ctx: Context) -> list[str]:
    return sorted({topic for name in ctx.roles for topic in ctx.outputs.get(name, ())})


async def check(ctx: Context) -> None:
    """Raise `AccessDeniedError` unless the principal holds every ACL the worker needs.

    A cluster that cannot be reached is only logged: the worker starts as it
    did before the check, its clients retrying (agents/service.py), and the
    ACLs go unchecked.
    """
    settings = ctx.settings
    connection = settings.connection
    try:
        await check_access(settings.bootstrap_servers,
                           worker_acls(settings, ctx.roles, _guarded_topics(ctx)),
                           topic=settings.state_topic, principal=connection.sasl_username,
                           **connection.client_options())
    except KafkaUnavailableError as exc:
        log.warning("the ACLs could not be checked at start-up (%s); starting unchecked", exc)


def install(ctx: Context) -> None:
    """Check the ACLs when the worker starts, before Faust connects (not for CLI commands).

    Needs the app's ``start_checks`` (`app.factory.CoordinationApp`); without
    them the worker starts unchecked, and says so.
    """
    checks = getattr(ctx.app, "start_checks", None)
    if checks is None:
        log.warning("%s has no start_checks: the worker's ACLs are not checked at start-up",
                    type(ctx.app).__name__)
        return
    checks.append(lambda: check(ctx))

"""Which worker owns which state partition, and asking another worker.

Faust's assignor knows which worker owns each changelog partition of the
``role_state`` table; a role's value lives in partition
``role_partition(role, P)`` (bytes keys make Faust's partitioner agree). We
look the owner up ourselves instead of Faust's ``table_route`` decorator,
because that one turns an unreachable owner into a 500 and forwards no
timeout; here every failure is an `agents.peers.Unreachable` the views answer
with 503.
"""

from __future__ import annotations

from typing import Any

import faust
from faust.types import TableT
from yarl import URL

from agents.context import Router

__all__ = ["FaustRouter", "owner_of"]


def _ident(url: str) -> tuple[str, int]:
    parsed = URL(url)
    return (parsed.host or "", parsed.port or 80)


class FaustRouter:
    """A `Router` from Faust's partition assignor: who owns which changelog
    partition of `table` (the ``role_state`` table)."""

    def __init__(self, app: faust.App, table: TableT[Any, Any]) -> None:
        self._app = app
        self._table = table

    def owners(self) -> dict[str, list[int]]:
        topic = self._table.changelog_topic.get_topic_name()
        try:
            metadata = self._app.router.table_metadata(self._table.name)
        except KeyError:
            return {}
        return {str(url): sorted(topics.get(topic, [])) for url, topics in metadata.items()
                if topics.get(topic)}

    def is_self(self, url: str) -> bool:
        return _ident(url) == _ident(str(self._app.conf.canonical_url))


def owner_of(router: Router, partition: int) -> str | None:
    """The URL of the worker owning `partition`, or None while it is unassigned."""
    for url, partitions in router.owners().items():
        if partition in partitions:
            return url
    return None

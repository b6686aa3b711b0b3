"""The two changelog-backed Faust tables of the worker application.

Keys and values are raw bytes: keys so Faust's own routing (murmur2 of the
key bytes, as Kafka's partitioner) lands on `krabka.role_partition`;
values so the orjson codecs in `agents.fold.role_value` and
`agents.fold.partition_value` own the format. Both tables have the state topic's
partition count, so their changelogs are co-partitioned with it and a table
write made while folding partition p goes to changelog partition p.
"""

from __future__ import annotations

from typing import NamedTuple

import faust
from faust.types import TableT

__all__ = ["PARTITION_STATE", "ROLE_STATE", "Tables", "declare"]

ROLE_STATE = "role_state"
PARTITION_STATE = "partition_state"


class Tables(NamedTuple):
    """`role_state` (key: role UTF-8) and `partition_state` (key: partition digits)."""

    role_state: TableT[bytes, bytes]
    partition_state: TableT[bytes, bytes]


def declare(app: faust.App, partitions: int) -> Tables:
    """Declare both tables on `app`."""
    return Tables(
        # key_type/value_type bytes is what selects Faust's raw serializer
        # for the store and the changelog alike.
        app.Table(ROLE_STATE, key_type=bytes, value_type=bytes, partitions=partitions,
                  help="Each role's roster, lease, tenure and skipped records"),
        app.Table(PARTITION_STATE, key_type=bytes, value_type=bytes, partitions=partitions,
                  help="Per state partition: records no role owns"),
    )

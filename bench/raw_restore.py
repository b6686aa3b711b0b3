"""A restore's least work as a process of its own: ``python -m bench.raw_restore
BOOTSTRAP TOPIC`` reads every partition of TOPIC to its end (read_committed),
keeps the last value of each key, prints how many records it read and how many
keys it kept, and exits. worker-recovery times it from the spawn to the exit,
beside the worker's own spawn to ready (`bench.worker_figures`).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from bench.fold import consume_from


async def restore(bootstrap: str, topic: str) -> tuple[int, int]:
    """The records read and the keys kept."""
    table: dict[bytes, bytes] = {}

    async def keep(messages: list[Any]) -> None:
        for message in messages:
            table[message.key] = message.value

    records = await consume_from(bootstrap, topic, keep)
    return records, len(table)


def main(argv: list[str]) -> None:
    bootstrap, topic = argv
    records, keys = asyncio.run(restore(bootstrap, topic))
    print(f"{records} {keys}")


if __name__ == "__main__":
    main(sys.argv[1:])

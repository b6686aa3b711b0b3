"""Which attributes of faust-streaming's, mode-streaming's and aiokafka's classes a
worker's app changes: run in a fresh interpreter, it prints each one that differs
from upstream, one per line, after it has built and installed the worker's app
and used each of the worker's Faust classes.

    python -m tests.app.upstream_classes [--global-change]

``--global-change`` changes one of mode's class attributes after the snapshot, as
a global patch would, so a test can show the comparison sees it.
"""

from __future__ import annotations

import asyncio
import importlib
import pkgutil
import sys
from typing import Any

PACKAGES = ("faust", "mode", "aiokafka")

UPSTREAM_STATE = frozenset({
    # aiokafka numbers the producers it builds with a class attribute.
    "aiokafka.producer.producer:AIOKafkaProducer._PRODUCER_CLIENT_ID_SEQUENCE",
})
"""Class attributes the packages themselves change as they run."""


def import_everything() -> None:
    """Import every module of the three packages that imports here (some need
    optional dependencies this project does not install)."""
    for name in PACKAGES:
        package = importlib.import_module(name)
        for module in pkgutil.walk_packages(package.__path__, f"{name}."):
            if module.name.endswith(".__main__"):  # a command line, not a module
                continue
            try:
                importlib.import_module(module.name)
            except Exception:  # an optional dependency is missing
                continue


def snapshot() -> dict[str, tuple[type, dict[str, Any]]]:
    """Every class the three packages define, with its own attributes as they are now."""
    classes: dict[str, tuple[type, dict[str, Any]]] = {}
    for module_name, module in list(sys.modules.items()):
        if module is None or module_name.split(".")[0] not in PACKAGES:
            continue
        for value in list(vars(module).values()):
            if isinstance(value, type) and value.__module__ == module_name:
                classes[f"{module_name}:{value.__qualname__}"] = (value, dict(vars(value)))
    return classes


def differences(before: dict[str, tuple[type, dict[str, Any]]]) -> list[str]:
    """``module:Class.attribute`` of each attribute added, removed or replaced since `before`."""
    changed = []
    for name, (cls, attributes) in before.items():
        now = vars(cls)
        for attribute in attributes.keys() | now.keys():
            if attribute not in attributes or attribute not in now or (
                    attributes[attribute] is not now[attribute]):
                changed.append(f"{name}.{attribute}")
    return sorted(set(changed) - UPSTREAM_STATE)


async def use_the_worker_app() -> None:
    """Build and install the worker's app, and make each object it builds of the
    worker's classes, as a running worker does."""
    from app.install import install
    from app.settings import Settings
    from krabka.kafka import Connection
    from krabka.testing import MemoryBroker, MemoryTransport
    from tests.app.test_app_install import GOOD, user_app

    app = user_app()
    broker = MemoryBroker()
    settings = Settings(connection=Connection("k1:9092"), app_id="user-app", partitions=4,
                        state_topic="user-state", events_topic="user-events", member_id="m")
    install(app, settings, transport_factory=lambda: MemoryTransport(broker))
    client = app.producer._new_producer(transactional_id="user-app-0-0")
    await client.stop()
    for built in (app.consumer._thread, app.consumer.transactions, app.tables.recovery,
                  app.tables.changelog_queue, app.flow_control, app.producer.buffer):
        assert built is not None
    assert GOOD


def main(argv: list[str]) -> None:
    import_everything()
    before = snapshot()
    asyncio.run(use_the_worker_app())
    if "--global-change" in argv:
        from mode.utils.queues import FlowControlEvent

        FlowControlEvent.resume = lambda self: None  # type: ignore[method-assign]
    for line in differences(before):
        print(line)


if __name__ == "__main__":
    main(sys.argv[1:])

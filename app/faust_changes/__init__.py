"""The worker's changes to faust-streaming, mode-streaming and aiokafka, scoped to
the worker's own Faust app (`ChangedApp`) through Faust's extension points.

Each change (`app.faust_changes.registry`) adds a mixin to one or more of
Faust's classes; `classes` builds the worker's subclass of each from the
changes that apply to the installed versions. The app takes them where Faust
lets an app choose its classes: its transport (``App._new_transport``: the
driver the broker URL names, subclassed), whose ``Consumer``, ``Producer`` and
``TransactionManager`` attributes are the worker's; its ``TableManager``
and ``Table`` settings; and its flow control (``App.flow_control``). Where Faust builds an
object by a literal class name, with no setting for it, the smallest override
builds the worker's class instead, named by a class attribute as Faust's
transport names its consumer: the consumer's thread
(``Consumer._new_consumer_thread``, ``ConsumerThread``), the producer's buffer
(``Producer.__init__``, ``ProducerBuffer``), the table manager's recovery
(``TableManager.recovery``, ``Recovery``), a table's RocksDB store
(``Table._new_store_by_url``, ``RocksDBStore``) and aiokafka's sender
(`WorkerClientProducer`).

No class attribute of Faust, mode or aiokafka is changed, so another app in the
same process, and the coordination library's own aiokafka clients, run as
upstream wrote them.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import faust
from faust.stores.rocksdb import Store as RocksDBStore
from faust.tables.manager import TableManager
from faust.tables.recovery import Recovery
from faust.tables.table import Table
from faust.transport import consumer as faust_consumer
from faust.transport import drivers
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.transport.producer import ProducerBuffer
from mode.utils.objects import cached_property
from mode.utils.queues import FlowControlEvent

from app.faust_changes.registry import CHANGES, Change, Seam, applicable
from app.faust_internals import FAUST, MODE
from krabka.kafka.aiokafka_internals import AIOKAFKA

__all__ = ["ChangedApp", "WorkerClasses", "classes", "installed_versions"]

log = logging.getLogger("app.faust_changes")


def installed_versions() -> dict[str, str]:
    """The installed version of each distribution a change is written for."""
    return {each.distribution: metadata.version(each.distribution)
            for each in (FAUST, MODE, AIOKAFKA)}


@dataclass(frozen=True)
class WorkerClasses:
    """The worker's subclasses of Faust's classes, with the changes they carry."""

    applied: tuple[Change, ...]
    left_out: tuple[Change, ...]
    """Changes written for other versions than the installed ones (``exact``)."""
    transport: type[faust_aiokafka.Transport]
    table_manager: type[TableManager]
    table: type[Table]
    flow_control: type[FlowControlEvent]

    @property
    def keeps_local_tables(self) -> bool:
        """Whether a table's local store holds only committed changelog records with
        their offset (FAUST-17), so a worker's data directory outlives its process."""
        return any(Seam.STORE in change.mixins for change in self.applied)


def _subclass(name: str, base: type, changes: tuple[Change, ...], seam: Seam,
              namespace: Mapping[str, Any] | None = None) -> Any:
    """`base`'s subclass `name` with the mixins `changes` add at `seam`, in registry order."""
    mixins = tuple(change.mixins[seam] for change in changes if seam in change.mixins)
    return type(name, (*mixins, base), {"__module__": __name__, **(namespace or {})})


@functools.cache
def _classes_for(versions: tuple[tuple[str, str], ...]) -> WorkerClasses:
    applied, left_out = applicable(dict(versions), CHANGES)
    thread = _subclass("WorkerConsumerThread", faust_aiokafka.AIOKafkaConsumerThread,
                       applied, Seam.CONSUMER_THREAD)
    buffer = _subclass("WorkerProducerBuffer", ProducerBuffer, applied, Seam.PRODUCER_BUFFER)
    recovery = _subclass("WorkerRecovery", Recovery, applied, Seam.RECOVERY)

    def _new_consumer_thread(self: Any) -> Any:
        # Faust's builds AIOKafkaConsumerThread by name: the same, of the worker's class.
        return self.ConsumerThread(self, loop=self.loop, beacon=self.beacon)

    def producer_init(self: Any, *args: Any, **kwargs: Any) -> None:
        faust_aiokafka.Producer.__init__(self, *args, **kwargs)
        # Faust's builds ProducerBuffer by name and wires it up: the same, of the
        # worker's class, before anything has seen the first one.
        built = self.ProducerBuffer(loop=self.loop, beacon=self.beacon)
        built.threaded_producer = getattr(self.buffer, "threaded_producer", None)
        built.app = self.buffer.app
        self.buffer = built

    def recovery_of(self: Any) -> Any:
        # Faust's builds Recovery by name: the same, of the worker's class.
        if self._recovery is None:
            self._recovery = self.Recovery(self.app, self, beacon=self.beacon, loop=self.loop)
        return self._recovery

    consumer = _subclass("WorkerConsumer", faust_aiokafka.Consumer, applied, Seam.CONSUMER,
                         {"_new_consumer_thread": _new_consumer_thread,
                          "ConsumerThread": thread})
    producer = _subclass("WorkerProducer", faust_aiokafka.Producer, applied, Seam.PRODUCER,
                         {"__init__": producer_init, "ProducerBuffer": buffer})
    transactions = _subclass("WorkerTransactionManager", faust_consumer.TransactionManager,
                             applied, Seam.TRANSACTION_MANAGER)
    transport = type("WorkerTransport", (faust_aiokafka.Transport,), {
        "__module__": __name__, "Consumer": consumer, "Producer": producer,
        "TransactionManager": transactions})
    table_manager = _subclass("WorkerTableManager", TableManager, applied, Seam.TABLE_MANAGER,
                              {"recovery": property(recovery_of), "Recovery": recovery})
    store = _subclass("WorkerRocksDBStore", RocksDBStore, applied, Seam.STORE)
    table = _subclass("WorkerTable", Table, applied, Seam.TABLE, {"RocksDBStore": store})
    flow_control = _subclass("WorkerFlowControlEvent", FlowControlEvent, applied,
                             Seam.FLOW_CONTROL)
    return WorkerClasses(applied=applied, left_out=left_out, transport=transport,
                         table_manager=table_manager, table=table, flow_control=flow_control)


def classes(versions: Mapping[str, str] | None = None) -> WorkerClasses:
    """The worker's classes for `versions` (default: the installed ones); built once."""
    versions = installed_versions() if versions is None else versions
    return _classes_for(tuple(sorted(versions.items())))


class ChangedApp(faust.App):
    """A Faust app built of the worker's classes (`classes`): its transport, table
    manager and flow control carry the changes of `app.faust_changes.registry`.

    An app given its own ``TableManager`` or ``Table`` setting keeps it, without
    that class's changes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.worker_classes = classes()
        if self.worker_classes.left_out:
            log.warning("faust-streaming %s: the changes %s were written for %s and are "
                        "not applied (docs/upstream/)", faust.__version__,
                        ", ".join(change.id for change in self.worker_classes.left_out),
                        ", ".join(each.requirement for each in (FAUST, MODE)))
        kwargs.setdefault("TableManager", self.worker_classes.table_manager)
        kwargs.setdefault("Table", self.worker_classes.table)
        super().__init__(*args, **kwargs)

    def _new_transport(self) -> Any:
        return self._transport_of(self.conf.broker_consumer)

    def _new_producer_transport(self) -> Any:
        return self._transport_of(self.conf.broker_producer)

    def _transport_of(self, urls: Any) -> Any:
        driver = drivers.by_url(urls[0])
        if issubclass(self.worker_classes.transport, driver):
            driver = self.worker_classes.transport
        return driver(urls, self)

    @cached_property
    def flow_control(self) -> FlowControlEvent:
        return self.worker_classes.flow_control(loop=self.loop)

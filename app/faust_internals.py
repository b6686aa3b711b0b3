"""The faust-streaming and mode-streaming versions the worker was tested with, and
the internals it uses.

`app.faust_patches` replaces some of Faust's methods, and of mode-streaming's
(Faust's service and queue library: ``FlowControlEvent``), with fixed copies
written against faust-streaming 0.15.3's and mode-streaming 0.7.1's source
(docs/upstream-faust.md), and the recovery regression test wraps another
(``tests/app/faust_seek_check.py``). A release the patches were not checked
against may have fixed, moved or changed what they replace, so each range is
that one release: the worker refuses another of either at import unless
``COORDINATION_ALLOW_UNTESTED_FAUST=1`` (then it warns, and the recovery
patches, which only make sense on the code they were checked against, are
not installed). One variable covers both: faust-streaming and its
mode-streaming are one stack to the worker, and a Faust upgrade usually
brings a mode-streaming one.

`INTERNALS` lists every non-public Faust name the worker uses (and the aiokafka names
it reaches through Faust), as ``"module:Object.attribute"``;
a unit test checks that each still exists in the installed faust-streaming.
"""

from __future__ import annotations

from coordination.versions import DependencyRange

__all__ = ["FAUST", "INTERNALS", "MODE"]

FAUST = DependencyRange(
    distribution="faust-streaming",
    specifier="==0.15.3",
    override="COORDINATION_ALLOW_UNTESTED_FAUST",
)

MODE = DependencyRange(
    distribution="mode-streaming",
    specifier="==0.7.1",
    override=FAUST.override,
)
"""Its version is read from the installed distribution's metadata: the ``mode``
package's own ``__version__`` is a placeholder ("0.0.1")."""

INTERNALS: tuple[str, ...] = (
    # Recovery high watermarks asked of the broker (patch 1).
    "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread._highwaters",
    "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread._ensure_consumer",
    # Commits racing at shutdown (patch 2).
    "faust.transport.drivers.aiokafka:Producer.commit_transactions",
    "faust.transport.drivers.aiokafka:Producer._trn_locks",
    "faust.transport.drivers.aiokafka:Producer._transaction_producers",
    # Table writes drained before an at-least-once commit (patch 2b).
    "faust.transport.drivers.aiokafka:Producer.flush",
    # A table write made after its transaction ended is dropped (patch 2c).
    "faust.transport.producer:ProducerBuffer._send_pending",
    # The producers of partitions no longer active stopped at a rebalance (patch 11).
    "faust.transport.consumer:TransactionManager.on_rebalance",
    "faust.transport.consumer:TransactionManager._tps_to_transactional_ids",
    "faust.transport.drivers.aiokafka:Producer.stop_transaction",
    # A rebalance during table recovery (patch 3), and the seek check of its test.
    "faust.tables.recovery:Recovery._wait",
    "faust.tables.recovery:Recovery._restart_recovery",
    "faust.tables.recovery:Recovery._seek_offsets",
    "faust.tables.recovery:Recovery.signal_recovery_start",
    "faust.tables.recovery:RebalanceAgain",
    # The recovery's end found after 0.5 s idle, not 10 s (patch 4).
    "faust.tables.manager:TableManager._changelog_queue",
    "faust.tables.recovery:Recovery._slurp_changelogs.fun",
    # A position never past a record still on its way to the table (patch 5).
    "faust.transport.consumer:Consumer._wait_next_records",
    "faust.transport.consumer:ThreadDelegateConsumer.position",
    # The consumer thread's fetches not held back behind an undrained partition (patch 7).
    "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread.on_start",
    "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread._consumer",
    "aiokafka.consumer.consumer:AIOKafkaConsumer._fetcher",
    "aiokafka.consumer.fetcher:Fetcher._prefetch_backoff",
    # The consumer thread's long poll (patch 9).
    "aiokafka.consumer.fetcher:Fetcher._fetch_max_wait_ms",
    # A record handed to the streams once, never emptied from their queues by
    # the resume that ends a recovery (patch 12).
    "faust.transport.consumer:Consumer._drain_messages",
    "faust.transport.consumer:Consumer._is_changelog_tp",
    "faust.tables.recovery:Recovery.on_recovery_completed",
    # A partition's position before the recovery has sought it (patch 13).
    "faust.tables.recovery:Recovery._build_highwaters",
    # The table manager starts without its second's sleep (patch 10).
    "faust.tables.manager:TableManager._update_channels",
    # No record of a paused partition fetched while no partition is active (patch 14).
    "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread._fetch_records",
    "aiokafka.consumer.fetcher:Fetcher.fetched_records",
    # A connection lost during FindCoordinator is retried by the worker's Faust
    # producers, whose aiokafka clients and their senders are subclasses (patch 8).
    "faust.transport.drivers.aiokafka:Producer._producer_type",
    "aiokafka.producer.producer:AIOKafkaProducer._sender",
    "aiokafka.producer.sender:Sender._find_coordinator",
    "aiokafka.producer.sender:Sender._retry_backoff",
    # The fold's committed offsets, for its lag in GET /ready (app.health).
    "faust.transport.consumer:Consumer._committed_offset",
    # Faust's Prometheus sensor on the worker's own registry (app.metrics): the
    # module's __all__ exports only setup_prometheus_sensors, which would also
    # claim GET /metrics for itself, so the worker builds its two parts directly.
    "faust.sensors.prometheus:FaustMetrics.create",
    "faust.sensors.prometheus:PrometheusMonitor",
    # Which event a table write of a batch belongs to (agents.fold.as_current_event).
    "faust.streams:_current_event",
)

"""The aiokafka versions the Kafka adapter was tested with, and the internals it uses.

The adapter goes beyond aiokafka's public API where that API cannot do the
job: it closes clients by hand when a bounded ``stop()`` did not finish and
lets a cancelled ``bootstrap()`` finish first, by replacing it on the client
instance that the client's own ``start()`` calls
(`krabka.kafka.lifecycle`), gives a role producer one connection per
broker instead of two (`krabka.kafka.producer.one_connection`), writes a lease
record and commits it in requests of its own over a role producer's client
(`krabka.kafka.producer.direct_lease`), drives the
producer's transaction manager itself and reads its fatal cause
(`krabka.kafka.producer.fenced`), reads a consumer's position without awaiting
and wakes on its Fetch responses (`krabka.kafka.consumer.positions`), sends
requests aiokafka does not define (`krabka.kafka.protocol.messages`), starts a
prepared producer's network client apart from its sender
(`krabka.kafka.producer.prepared`) from what the transport's own client knows
(`krabka.kafka.producer.seeded`), retries CONCURRENT_TRANSACTIONS sooner than
aiokafka does (`krabka.kafka.producer.prompt_retry`) and watches the registration
producer's sender (`krabka.kafka.transport`). The worker reads the same
transaction manager (``app/faust_changes/producing.py``).

`AIOKAFKA` is the range the suite runs against; the package refuses another
version at import. `INTERNALS` lists every non-public name used, as
``"module:Object.attribute"`` (``"module:name"`` for a module attribute); a unit
test checks that each still exists in the installed aiokafka, so an upgrade
that renames one fails ``make unit`` instead of a tenure in production.
"""

from __future__ import annotations

from krabka.runtime.versions import DependencyRange

__all__ = ["AIOKAFKA", "INTERNALS"]

AIOKAFKA = DependencyRange(
    distribution="aiokafka",
    # The lowest version the suite has passed on, up to the next minor release:
    # aiokafka is 0.x, and its minor releases change the internals listed below.
    # CI installs the newest release in the range, so each run tests that one.
    specifier=">=0.14.0,<0.15",
    override="COORDINATION_ALLOW_UNTESTED_AIOKAFKA",
)

INTERNALS: tuple[str, ...] = (
    # The producer and what a bounded stop closes by hand.
    "aiokafka.producer.producer:AIOKafkaProducer._txn_manager",
    "aiokafka.producer.producer:AIOKafkaProducer._message_accumulator",
    "aiokafka.producer.producer:AIOKafkaProducer._sender",
    "aiokafka.producer.producer:AIOKafkaProducer._closed",
    "aiokafka.producer.sender:Sender.sender_task",
    "aiokafka.producer.message_accumulator:MessageAccumulator._batches",
    "aiokafka.producer.message_accumulator:MessageAccumulator._pending_batches",
    "aiokafka.producer.message_accumulator:MessageAccumulator.fail_all",
    "aiokafka.producer.message_accumulator:MessageBatch.future",
    "aiokafka.producer.message_accumulator:MessageBatch._drain_waiter",
    # The transaction manager, an internal object: every member used counts.
    "aiokafka.producer.transaction_manager:TransactionState",
    "aiokafka.producer.transaction_manager:TransactionManager.state",
    "aiokafka.producer.transaction_manager:TransactionManager.producer_id",
    "aiokafka.producer.transaction_manager:TransactionManager.producer_epoch",
    "aiokafka.producer.transaction_manager:TransactionManager.begin_transaction",
    "aiokafka.producer.transaction_manager:TransactionManager.is_in_transaction",
    "aiokafka.producer.transaction_manager:TransactionManager.is_fatal_error",
    "aiokafka.producer.transaction_manager:TransactionManager.wait_for_transaction_end",
    "aiokafka.producer.transaction_manager:TransactionManager._transaction_waiter",
    # A conditional bump moves the producer to the new epoch (`RoleProducer.rebind`).
    "aiokafka.producer.transaction_manager:PidAndEpoch",
    "aiokafka.producer.transaction_manager:TransactionManager._pid_and_epoch",
    "aiokafka.producer.transaction_manager:TransactionManager._sequence_numbers",
    # A producer prepared ahead of a challenge (`krabka.kafka.producer.prepared`):
    # its client connects and its sender finds the coordinator before it starts.
    "aiokafka.producer.sender:Sender.start",
    "aiokafka.producer.sender:Sender._find_coordinator",
    "aiokafka.client:CoordinationType",
    # A role producer's client started from its transport's (`krabka.kafka.producer.seeded`).
    "aiokafka.client:AIOKafkaClient._topics",
    "aiokafka.client:AIOKafkaClient._sync_task",
    "aiokafka.client:AIOKafkaClient._md_synchronizer",
    "aiokafka.cluster:ClusterMetadata.update_metadata",
    "aiokafka.protocol.metadata:MetadataRequest",
    # A role producer retries CONCURRENT_TRANSACTIONS promptly
    # (`krabka.kafka.producer.prompt_retry`): its sender's handlers, subclassed.
    "aiokafka.producer.sender:Sender._do_add_partitions_to_txn",
    "aiokafka.producer.sender:Sender._do_init_pid",
    "aiokafka.producer.sender:Sender._txn_manager",
    "aiokafka.producer.sender:BaseHandler.do",
    "aiokafka.producer.sender:BaseHandler._sender",
    "aiokafka.producer.sender:AddPartitionsToTxnHandler.handle_response",
    "aiokafka.producer.sender:InitPIDHandler.handle_response",
    "aiokafka.producer.transaction_manager:TransactionManager.txn_partitions",
    "aiokafka.producer.transaction_manager:TransactionManager.transactional_id",
    # A lease write in requests of our own (`krabka.kafka.producer.direct_lease`): the
    # sender's coordinator and backoff, the manager kept in step, and the calls
    # ``AIOKafkaConnection.send`` and ``_handle_frame`` make of a request.
    "aiokafka.producer.sender:Sender._coordinators",
    "aiokafka.producer.sender:Sender._coordinator_dead",
    "aiokafka.producer.sender:Sender._retry_backoff",
    "aiokafka.producer.transaction_manager:TransactionManager.sequence_number",
    "aiokafka.producer.transaction_manager:TransactionManager.increment_sequence_number",
    "aiokafka.producer.transaction_manager:TransactionManager._transition_to",
    "aiokafka.producer.transaction_manager:TransactionManager.complete_transaction",
    "aiokafka.conn:AIOKafkaConnection.send",
    "aiokafka.conn:AIOKafkaConnection._handle_frame",
    "aiokafka.record.default_records:DefaultRecordBatchBuilder",
    # A role producer uses one connection per broker (`krabka.kafka.producer.one_connection`).
    "aiokafka.client:ConnectionGroup",
    # The consumer: a bounded stop, and the position read without awaiting.
    "aiokafka.consumer.consumer:AIOKafkaConsumer._closed",
    "aiokafka.consumer.consumer:AIOKafkaConsumer._fetcher",
    "aiokafka.consumer.consumer:AIOKafkaConsumer._client",
    "aiokafka.consumer.consumer:AIOKafkaConsumer._subscription",
    "aiokafka.consumer.fetcher:Fetcher._fetch_task",
    "aiokafka.consumer.fetcher:Fetcher._pending_tasks",
    # A read wakes on every Fetch response (`krabka.kafka.consumer.positions.answers`).
    "aiokafka.consumer.fetcher:Fetcher._proc_fetch_request",
    "aiokafka.consumer.subscription_state:SubscriptionState.subscription",
    "aiokafka.consumer.subscription_state:Subscription.assignment",
    "aiokafka.consumer.subscription_state:Assignment.state_value",
    "aiokafka.consumer.subscription_state:TopicPartitionState.has_valid_position",
    "aiokafka.consumer.subscription_state:TopicPartitionState.position",
    # The admin client: its network client, and a request it has no method for.
    "aiokafka.admin.client:AIOKafkaAdminClient._client",
    "aiokafka.admin.client:AIOKafkaAdminClient._send_request",
    # Broker error codes 90 and 105 are registered in aiokafka's table.
    "aiokafka.errors:kafka_errors",
    # The hooks the hand-written protocol messages override.
    "aiokafka.protocol.api:Request.build",
    "aiokafka.protocol.api:RequestStruct.FLEXIBLE_VERSION",
    "aiokafka.protocol.api:RequestStruct.parse_response_header",
    "aiokafka.protocol.api:ResponseHeader_v0",
)

"""The faust-streaming and mode-streaming versions the worker was tested with, and
the internals it uses beyond its changes to Faust.

The worker's changes to Faust (`app.faust_changes.registry`) subclass Faust's
classes and mode-streaming's (Faust's service and queue library:
``FlowControlEvent``), some with copies of methods written against
faust-streaming 0.15.3's and mode-streaming 0.7.1's source, and the recovery
regression test wraps another (``tests/app/faust_seek_check.py``). A release
the changes were not checked against may have fixed, moved or changed what they
override, so each range is that one release: the worker refuses another of
either at import unless ``COORDINATION_ALLOW_UNTESTED_FAUST=1`` (then it warns,
and the changes that only make sense on the code they were written against are
not applied: the registry's ``exact`` ones). One variable covers both:
faust-streaming and its mode-streaming are one stack to the worker, and a Faust
upgrade usually brings a mode-streaming one.

`INTERNALS` lists every other non-public Faust name the worker uses, as
``"module:Object.attribute"``; the changes' own are in the registry. A unit
test checks that each still exists in the installed faust-streaming.
"""

from __future__ import annotations

from krabka.runtime.versions import DependencyRange

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
    # The table manager's recovery and the consumer's thread, which Faust builds by
    # class name: the worker's app builds its own subclasses (app.faust_changes).
    "faust.tables.manager:TableManager._recovery",
    "faust.transport.consumer:ThreadDelegateConsumer._new_consumer_thread",
    # The seek check of the recovery's regression test (tests/app/faust_seek_check.py).
    "faust.tables.recovery:Recovery._seek_offsets",
    # The fold's committed offsets and records in flight, for its lag in GET /ready
    # (app.health).
    "faust.transport.consumer:Consumer._committed_offset",
    "faust.transport.consumer:Consumer._unacked_messages",
    "faust.transport.consumer:Consumer._acked",
    # Faust's Prometheus sensor on the worker's own registry (app.metrics): the
    # module's __all__ exports only setup_prometheus_sensors, which would also
    # claim GET /metrics for itself, so the worker builds its two parts directly.
    "faust.sensors.prometheus:FaustMetrics.create",
    "faust.sensors.prometheus:PrometheusMonitor",
    # Which event a table write of a batch belongs to (agents.fold.agent.as_current_event).
    "faust.streams:_current_event",
)

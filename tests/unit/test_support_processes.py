"""`tests.support.processes.Service`, the helper the process tests read events with."""

from __future__ import annotations

from tests.support.processes import Service

LAST_EVENT_THEN_EXIT = "import json; print(json.dumps({'event': 'last'}), flush=True)"


def test_once_stop_returns_every_event_the_process_printed_is_in_its_events():
    """A process can exit before the reader thread has recorded its last lines
    (seen in CI: `has("left")` right after `stop()` said no). Holding the
    events' lock keeps the reader from recording anything until `stop` waits."""
    service = Service(program=["-c", LAST_EVENT_THEN_EXIT])
    with service._printed:
        service.process.wait(30)
        assert service.stop() == 0
        assert service.has("last")

"""Calling the user's callbacks without letting their bugs end a tenure.

Observers (`RunnerObserver`, `Leadership.on_renewed`) and admissions
(`Admission.lease_written`) are told of what happens to a tenure; they do
not decide it. An error one of them raises is a bug in the user's code
(a metrics label that is missing, a counter of the wrong type): it is
logged with its traceback, once per call, and the tenure and the runner go
on as if the callback had returned. Letting it propagate would end a
campaign after its Leadership exists, or stop a runner between two of its
steps, and leave a tenure renewing with nobody to stop it.

Only `Exception` is contained: a `CancelledError`, `KeyboardInterrupt` or
`SystemExit` raised inside a callback goes on to its caller as usual.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import ParamSpec

__all__ = ["contained"]

log = logging.getLogger("krabka.runtime.callbacks")

P = ParamSpec("P")


def contained(role: str, what: str, callback: Callable[P, object],
              *args: P.args, **kwargs: P.kwargs) -> None:
    """Call ``callback(*args, **kwargs)``; log an error it raises and return.

    `role` and `what` (``"the observer's elected"``, say) name the call in
    the log line, so the user can find the callback at fault.
    """
    try:
        callback(*args, **kwargs)
    except Exception:
        log.exception("%s: %s failed; the tenure and the runner go on", role, what)

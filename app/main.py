"""``faust -A app.main worker``: the worker the CLI, Procfile and `make run` start.

Settings come from the environment (`app.settings.Settings.from_env`, listed
in docs/app.md). With ``COORDINATION_DEMO=1`` the worker also stands for the
demo role (`app.demo`). Your own roles: import this module's `app` in yours,
declare ``@role("name")`` functions there, and run ``faust -A yours worker``.
"""

from __future__ import annotations

from app.factory import build
from app.settings import Settings

settings = Settings.from_env()
if settings.demo:
    # A `from` import: `import app.demo` would bind the name `app` to the package here.
    from app import demo  # noqa: F401  (declares the demo role)

context = build(settings)
app = context.app

__all__ = ["app", "context", "settings"]

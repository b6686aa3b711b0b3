"""``faust -A app.main worker``: the worker the CLI, Procfile and `make run` start.

Settings come from the environment (`app.settings.Settings.from_env`, listed
in docs/app.md); the coordination is installed on the app as on any user's
(`app.install`). With ``COORDINATION_DEMO=1`` the worker also stands for the
demo role (`app.demo`). Your own roles belong in your own app
(examples/own_app/), or on this one: ``@installation.role("name")`` in a
module that imports this one, run with ``faust -A yours worker``.
"""

from __future__ import annotations

from app.factory import create_app
from app.install import install
from app.settings import Settings

settings = Settings.from_env()
app = create_app(settings)
installation = install(app, settings)
context = installation.context
if settings.demo:
    # A `from` import: `import app.demo` would bind the name `app` to the package here.
    from app import demo

    installation.role(demo.DEMO_ROLE, outputs=[demo.DEMO_TOPIC])(demo.demo)

__all__ = ["app", "context", "installation", "settings"]

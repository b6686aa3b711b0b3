"""``faust -A app.main worker``: the worker the CLI, Procfile and `make run` start.

Settings come from the environment (`app.settings.Settings.from_env`, listed
in docs/app.md); the coordination is installed on the app as on any user's
(`app.install`). With ``COORDINATION_DEMO=1`` the worker also stands for the
demo role (`app.demo`). Your own roles belong in your own app
(examples/own_app/), or on this one: ``@installation.role("name")`` in a
module that imports this one, which ``COORDINATION_ROLES_MODULES`` names (the
image and the manifests then run unchanged; docs/deploy.md#your-own-roles),
or run with ``faust -A yours worker``.
"""

from __future__ import annotations

import importlib

from app.factory import create_app
from app.install import InstallError, install
from app.settings import Settings


class RolesModuleError(InstallError, ImportError):
    """A module ``COORDINATION_ROLES_MODULES`` names could not be imported."""


def import_role_modules(modules: tuple[str, ...]) -> None:
    """Import each module, in order: each declares its roles on `installation`
    at its import, as agents are declared."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise RolesModuleError(
                f"COORDINATION_ROLES_MODULES names {module!r}, which cannot be imported "
                f"({exc}); put it on PYTHONPATH (the image's is /srv)") from exc

settings = Settings.from_env()
app = create_app(settings)
installation = install(app, settings)
context = installation.context
if settings.demo:
    # A `from` import: `import app.demo` would bind the name `app` to the package here.
    from app import demo

    installation.role(demo.DEMO_ROLE, outputs=[demo.DEMO_TOPIC])(demo.demo)
# Last: the modules import this one, whose names above are then bound.
import_role_modules(settings.role_modules)

__all__ = ["RolesModuleError", "app", "context", "import_role_modules", "installation",
           "settings"]

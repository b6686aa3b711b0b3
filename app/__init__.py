"""The Faust worker application of krabka-coordination (docs/design.md#the-faust-application).

``faust -A app.main worker`` runs one worker. `app.settings` reads the
environment, `app.factory` builds the project's Faust app (a
`app.faust_app.CoordinationApp`), `app.install` adds the coordination to it
or to a user's app (topics, tables, agents, role service, web view),
`app.web` and `app.dashboard` are the HTTP view, `app.metrics` the
Prometheus registry, `app.demo` the demo role, and
`app.faust_patches` the fixes to faust-streaming's bugs and slow paths
(and one to aiokafka's).
See docs/app.md.

Importing the package refuses a faust-streaming or mode-streaming version the
worker was not tested with, unless ``COORDINATION_ALLOW_UNTESTED_FAUST=1``
(`app.faust_internals`).
"""

from importlib.metadata import version

import faust

from app.faust_internals import FAUST, MODE

FAUST.require(faust.__version__)
MODE.require(version(MODE.distribution))

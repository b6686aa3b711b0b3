"""Entry point of ``python -m krabka``; see `krabka.cli.main`."""

import sys

from krabka.cli.main import main

sys.exit(main())

"""Entry point of ``python -m coordination``; see `coordination.cli`."""

import sys

from coordination.cli import main

sys.exit(main())

"""``krabka run`` once, to the end of its command: a campaign on a real cluster
whose command reports the tenure it was given and exits by itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

STATUS = 7
"""The command's exit status, which ``--on-exit exit`` makes krabka run's."""

REPORT = ("import os, sys; "
          "print(os.environ['KRABKA_ROLE'], os.environ['KRABKA_FENCING'], "
          "os.environ['KRABKA_TOKEN']); sys.exit(7)")


def run_once(env: dict[str, str], role: str, *flags: str) -> subprocess.CompletedProcess[str]:
    """`krabka run ROLE FLAGS --on-exit exit -- python -c REPORT`, to its end."""
    return subprocess.run(
        [sys.executable, "-m", "krabka", "run", role, "--member", "cli-run",
         "--lease-duration", "6", "--renew-interval", "1", "--challenge-stagger", "0.5",
         "--on-exit", "exit", *flags, "--", sys.executable, "-c", REPORT],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)

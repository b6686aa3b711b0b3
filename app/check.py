"""``python -m app.check``: the worker's effective configuration, secrets masked.

Prints the worker's settings (each with its variable and where its value
came from), the options the worker gives Faust, and every Faust environment
variable that is set, then the conflicts the worker would refuse to start
with (`app.faust_config`). Exits 0 when the worker would start, 1 when a Faust
variable contradicts its settings, 2 when a setting is invalid. Nothing is
sent to the cluster.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from dataclasses import fields

from app.faust_config import FIXED, SOURCES, conflicts, faust_options, faust_variables
from app.settings import VARIABLES, Settings, mask

__all__ = ["main", "report"]

def report(env: Mapping[str, str]) -> tuple[str, int]:
    """The configuration text for `env` and the exit status (see the module)."""
    lines = ["The worker's settings (docs/app.md#settings):"]
    try:
        settings = Settings.from_env(env)
    except ValueError as exc:
        return f"invalid setting: {exc}", 2
    # The connection masks its own password (a password file's path is no secret).
    shown = dict(settings.connection.describe())
    shown.update((VARIABLES[item.name], mask(VARIABLES[item.name], getattr(settings, item.name)))
                 for item in fields(settings) if item.name != "connection")
    for variable, value in shown.items():
        source = "environment" if env.get(variable) else "default"
        lines.append(f"  {variable} = {value}  ({source})")
    options = faust_options(settings)
    lines.append("Options the worker gives Faust:")
    for option, value in options.items():
        lines.append(f"  {option} = {mask(option, value)}  ({SOURCES.get(option, FIXED)})")
    found = faust_variables(env)
    lines.append("Faust environment variables set:" + ("" if found else " none"))
    for variable, (option, raw) in found.items():
        lines.append(f"  {variable} = {mask(variable, raw)}  (Faust's {option})")
    refused = conflicts(settings.app_id, options, env)
    if not refused:
        lines.append("No Faust variable contradicts the worker's settings.")
        return "\n".join(lines), 0
    lines.append("The worker refuses to start:")
    lines.extend(f"  - {conflict}" for conflict in refused)
    return "\n".join(lines), 1


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(prog="python -m app.check", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter
                            ).parse_args(argv)
    text, status = report(os.environ)
    print(text)
    return status


if __name__ == "__main__":
    sys.exit(main())

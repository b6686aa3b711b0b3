"""The container health check: exit 0 when this worker's endpoint answers 2xx.

    python deploy/probe.py [PATH]        (PATH defaults to /health)

The image's `HEALTHCHECK` runs it. Written by hand because the slim base image
has no curl or wget, and installing one only for this would add a network
client to the image; the Python standard library already has one. It reads
the worker's own settings (`COORDINATION_WEB_BIND`, `COORDINATION_WEB_PORT`),
so the check follows the port the worker serves on. Exit 1, with the reason
on stderr, on any other answer, a refused connection or a timeout.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence

DEFAULT_PATH = "/health"
DEFAULT_PORT = "6066"
TIMEOUT_SECONDS = 3.0
# A worker bound to every interface is reached on the loopback one.
ANY_ADDRESS = {"", "0.0.0.0", "::"}


def url(env: Mapping[str, str], path: str = DEFAULT_PATH) -> str:
    """The worker's endpoint `path`, as seen from inside its container."""
    host = env.get("COORDINATION_WEB_BIND", "")
    if host in ANY_ADDRESS:
        host = "127.0.0.1"
    elif ":" in host:
        host = f"[{host}]"
    port = env.get("COORDINATION_WEB_PORT") or DEFAULT_PORT
    return f"http://{host}:{port}{path}"


def check(target: str, timeout: float = TIMEOUT_SECONDS) -> str | None:
    """None when `target` answers 2xx, else why not."""
    try:
        with urllib.request.urlopen(target, timeout=timeout):
            return None
    except urllib.error.HTTPError as exc:  # a non-2xx answer
        return f"{target} answered {exc.code}: {exc.read(200).decode(errors='replace')}"
    except (OSError, ValueError) as exc:  # refused, timed out, bad address
        return f"{target} did not answer: {exc}"


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) > 1 or (args and not args[0].startswith("/")):
        print("usage: probe.py [PATH]  (PATH starts with /)", file=sys.stderr)
        return 2
    target = url(os.environ if env is None else env, *args)
    problem = check(target)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

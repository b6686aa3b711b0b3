"""The web view's baseline: an aiohttp server answering fixed bodies, nothing else.

    python -m bench.static_web PORT ROLE_BODY ROLES_BODY

``GET /roles/{role}/`` answers the bytes of the file ROLE_BODY and
``GET /roles/`` those of ROLES_BODY, as ``application/json``: the bodies a
worker answered, captured by the bench. What is left is the cost of HTTP on
this machine for bodies of that size, the floor under the worker's own view.
Stops on SIGTERM.
"""

from __future__ import annotations

import sys
from pathlib import Path

from aiohttp import web


def application(role_body: bytes, roles_body: bytes) -> web.Application:
    async def role(request: web.Request) -> web.Response:
        return web.Response(body=role_body, content_type="application/json")

    async def roles(request: web.Request) -> web.Response:
        return web.Response(body=roles_body, content_type="application/json")

    app = web.Application()
    app.router.add_get("/roles/", roles)
    app.router.add_get("/roles/{role}/", role)
    return app


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    port, role_file, roles_file = int(args[0]), Path(args[1]), Path(args[2])
    web.run_app(application(role_file.read_bytes(), roles_file.read_bytes()),
                host="127.0.0.1", port=port, print=None, access_log=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())

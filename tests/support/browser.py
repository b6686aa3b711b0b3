"""Headless Debian chromium driven over the DevTools protocol, for the dashboard test.

`Browser` starts ``chromium --headless --remote-debugging-port=0`` with a
fresh profile, reads the port it chose from its stderr, and talks to its
page over the DevTools websocket with aiohttp (already a dependency): a page
stays open while the test changes the cluster, which ``--dump-dom`` cannot
do. It records every request the page sends (``Network.requestWillBeSent``)
and stops the browser by its PID (its process group).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import os
import re
import shutil
import signal
import tempfile
from typing import Any

import aiohttp

__all__ = ["Browser", "chromium"]

START_TIMEOUT = 60.0
CALL_TIMEOUT = 30.0
_LISTENING = re.compile(rb"DevTools listening on (ws://\S+)")


def chromium() -> str | None:
    """Debian's chromium, if installed (``make browser``)."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """One headless chromium and its first page."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        """Each request the page sent: ``{"url", "type"}`` (the resource type)."""
        self._ids = itertools.count(1)
        self._calls: dict[int, asyncio.Future[Any]] = {}
        self._process: asyncio.subprocess.Process | None = None
        self._profile = tempfile.TemporaryDirectory(prefix="chromium-")
        self._session: aiohttp.ClientSession | None = None
        self._socket: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task[None] | None = None
        self._drain: asyncio.Future[bytes] | None = None

    async def __aenter__(self) -> Browser:
        browser = chromium()
        assert browser is not None, "Debian's chromium is not installed"
        self._process = await asyncio.create_subprocess_exec(
            browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--hide-scrollbars", "--no-first-run", "--remote-debugging-port=0",
            f"--user-data-dir={self._profile.name}", "--window-size=1280,900", "about:blank",
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE, start_new_session=True)
        try:
            endpoint = await asyncio.wait_for(self._endpoint(), START_TIMEOUT)
            self._session = aiohttp.ClientSession()
            port = re.search(r":(\d+)/", endpoint)
            assert port is not None
            async with self._session.get(f"http://127.0.0.1:{port.group(1)}/json/list") as r:
                pages = [t for t in await r.json() if t["type"] == "page"]
            self._socket = await self._session.ws_connect(pages[0]["webSocketDebuggerUrl"],
                                                          max_msg_size=0)
            self._reader = asyncio.ensure_future(self._read())
            await self.call("Network.enable")
            await self.call("Page.enable")
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _endpoint(self) -> str:
        assert self._process is not None
        assert self._process.stderr is not None
        while True:
            line = await self._process.stderr.readline()
            if not line:
                raise RuntimeError("chromium exited before it listened for DevTools")
            found = _LISTENING.search(line)
            if found:
                # Keep draining stderr, so chromium never blocks on a full pipe.
                self._drain = asyncio.ensure_future(self._process.stderr.read())
                return found.group(1).decode()

    async def _read(self) -> None:
        assert self._socket is not None
        async for message in self._socket:
            body = message.json()
            if "id" in body:
                future = self._calls.pop(body["id"], None)
                if future is not None and not future.done():
                    if "error" in body:
                        future.set_exception(RuntimeError(f"DevTools: {body['error']}"))
                    else:
                        future.set_result(body.get("result", {}))
            elif body.get("method") == "Network.requestWillBeSent":
                params = body["params"]
                self.requests.append({"url": params["request"]["url"],
                                      "type": params.get("type")})

    async def call(self, method: str, **params: Any) -> Any:
        """One DevTools command; its result."""
        assert self._socket is not None
        ident = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._calls[ident] = future
        await self._socket.send_json({"id": ident, "method": method, "params": params})
        return await asyncio.wait_for(future, CALL_TIMEOUT)

    async def open(self, url: str) -> None:
        """Navigate the page to `url`."""
        await self.call("Page.navigate", url=url)

    async def evaluate(self, expression: str) -> Any:
        """The JSON value of a JavaScript expression in the page."""
        result = await self.call("Runtime.evaluate", expression=expression,
                                 returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"the page threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def screenshot(self) -> bytes:
        """A PNG of the page as it is now."""
        shot = await self.call("Page.captureScreenshot", format="png")
        return base64.b64decode(shot["data"])

    async def close(self) -> None:
        """Stop the browser (by its PID) and remove its profile."""
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
        if self._socket is not None:
            await self._socket.close()
        if self._session is not None:
            await self._session.close()
        if self._process is not None and self._process.returncode is None:
            # Its own process group: the renderer and zygote processes stop with it.
            os.killpg(self._process.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(self._process.wait(), 10)
            except TimeoutError:
                os.killpg(self._process.pid, signal.SIGKILL)
                await self._process.wait()
        if self._drain is not None:
            with contextlib.suppress(Exception):
                await self._drain
        self._profile.cleanup()

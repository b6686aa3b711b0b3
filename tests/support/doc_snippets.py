"""The Python snippets of the README and docs/, found, checked and run.

A ```` ```python ```` block of a page is a snippet. The HTML comment on the
line before it, if any, says how it is checked (the comment does not render):

- no comment: it is run, in page order, in one namespace per page (a later
  snippet may use what an earlier one defined), with top-level ``await``
  allowed, as in ``python -m asyncio``; `run_page` says against what;
- ``<!-- snippet: integration, tests/…/test_x.py -->``: it needs a broker,
  and that test file runs it (found with `snippet_at`);
- ``<!-- snippet: not run, <why> -->``: it is not run, for the reason given;
- ``<!-- snippet: quoted, <source> -->``: a quotation of another project's
  code; only its syntax is checked (its names are that project's).

Every snippet but a quotation is checked for undefined names (ruff's F821,
over the page's snippets in order, so a name an earlier snippet defined is
known to a later one) and for syntax.

``python -m tests.support.doc_snippets PAGE`` runs the page's runnable
snippets (what the docs test does, in a fresh interpreter per page): on a
`MemoryBroker`, with `KafkaTransport` standing for a `MemoryTransport` on
it, and each role a snippet declared on a worker installation driven once
with a real `Leadership` until it has written or returned.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import inspect
import json
import re
import subprocess
import sys
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

HOWS = ("run", "integration", "not run", "quoted")
FENCE = re.compile(r"^( {0,3})(```|~~~)\s*(\w*)")
MARKER = re.compile(r"^\s*<!--\s*snippet:\s*(?P<how>[a-z ]+?)\s*(?:,\s*(?P<why>.*?))?\s*-->\s*$")

TOPICS = {"invoices": 3}
"""Topics the snippets write to besides the coordination's own, with their
partition counts: the broker a page runs on has them."""

ROLE_RUN_SECONDS = 10.0
"""How long a declared role's function may take to write its first record."""


class SnippetError(Exception):
    """A page's snippet markup is wrong (an unknown marker, an unclosed fence)."""


@dataclass(frozen=True)
class Snippet:
    page: str
    """The page, relative to the repository root."""
    line: int
    """The line of the snippet's first line of code (1-based)."""
    code: str
    how: str
    """One of `HOWS`."""
    why: str
    """The marker's text after its kind: the reason, source or test file."""

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def snippets(page: str, markdown: str) -> list[Snippet]:
    """The ```` ```python ```` blocks of `markdown` (the text of `page`), in order."""
    found = []
    lines = markdown.splitlines()
    number = 0
    while number < len(lines):
        opened = FENCE.match(lines[number])
        if not opened:
            number += 1
            continue
        indent, fence, language = opened.groups()
        end = next((i for i in range(number + 1, len(lines))
                    if lines[i].strip().startswith(fence) and not lines[i].strip()[3:].strip()),
                   None)
        if end is None:
            raise SnippetError(f"{page}:{number + 1}: a code block that is never closed")
        if language == "python":
            how, why = _marker(page, lines, number)
            body = [line[len(indent):] if line.startswith(indent) else line
                    for line in lines[number + 1:end]]
            found.append(Snippet(page, number + 2, "\n".join(body) + "\n", how, why))
        number = end + 1
    return found


def _marker(page: str, lines: Sequence[str], fence_index: int) -> tuple[str, str]:
    before = fence_index - 1
    while before >= 0 and not lines[before].strip():
        before -= 1
    if before < 0 or "snippet:" not in lines[before]:
        return "run", ""
    match = MARKER.match(lines[before])
    if not match or match.group("how") not in HOWS:
        raise SnippetError(f"{page}:{before + 1}: {lines[before].strip()!r} is not a snippet "
                           f"marker: <!-- snippet: {' | '.join(HOWS)}[, why] -->")
    how, why = match.group("how"), match.group("why") or ""
    if how != "run" and not why:
        raise SnippetError(f"{page}:{before + 1}: a snippet marked {how!r} says why (or "
                           "where it is run) after a comma")
    return how, why


def page_snippets(page: str) -> list[Snippet]:
    return snippets(page, (ROOT / page).read_text(encoding="utf-8"))


def snippet_at(page: str, how: str, why: str) -> Snippet:
    """The one snippet of `page` marked ``<!-- snippet: how, why -->``."""
    matching = [s for s in page_snippets(page) if s.how == how and s.why == why]
    if len(matching) != 1:
        raise SnippetError(f"{page} has {len(matching)} snippets marked {how!r}, {why!r}")
    return matching[0]


# --- the static checks ---------------------------------------------------------------


def static_problems(page_snippets: Sequence[Snippet]) -> list[str]:
    """Undefined names and syntax errors of one page's snippets, one line each.

    The snippets that are not quotations are checked as one module, in page
    order, by ruff (F821 and syntax errors; top-level ``await`` is allowed);
    a quotation is only parsed.
    """
    problems = []
    text: list[str] = []
    origin: list[tuple[Snippet, int]] = []  # (snippet, line within it) of each line of `text`
    for snippet in page_snippets:
        if snippet.how == "quoted":
            try:
                ast.parse(snippet.code)
            except SyntaxError as exc:
                problems.append(f"{snippet.page}:{snippet.line + (exc.lineno or 1) - 1}: "
                                f"syntax error: {exc.msg}")
            continue
        for offset, line in enumerate(snippet.code.splitlines()):
            text.append(line)
            origin.append((snippet, offset))
    if not text:
        return problems
    for diagnostic in _ruff("\n".join(text) + "\n"):
        row = diagnostic["location"]["row"]
        snippet, offset = origin[min(row, len(origin)) - 1]
        code = diagnostic.get("code")
        code = "syntax error:" if code in (None, "invalid-syntax") else code
        problems.append(f"{snippet.page}:{snippet.line + offset}: {code} "
                        f"{diagnostic['message']}")
    return problems


def _ruff(source: str) -> list[dict[str, Any]]:
    # --isolated: the project's configuration (its rule selection, its excludes) is
    # not the point here; only these two checks are.
    run = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--isolated", "--select", "F821,E9",
         "--output-format", "json", "--stdin-filename", "snippet.py", "-"],
        input=source, capture_output=True, text=True, check=False, timeout=60)
    if run.returncode not in (0, 1) or not run.stdout.strip().startswith("["):
        raise RuntimeError(f"ruff failed ({run.returncode}): {run.stderr.strip()}")
    return sorted(json.loads(run.stdout), key=lambda d: d["location"]["row"])


# --- paths and commands named in the docs ---------------------------------------------

CODE_SPAN = re.compile(r"(`+)(.+?)\1")
SHELL_LANGUAGES = ("sh", "console", "bash", "shell")
PYTHON_M = re.compile(r"(?:^|[\s(])python3? -m ([\w.]+)")
MAKE = re.compile(r"(?:^|[\s(])make ([\w-]+)")
FAUST_A = re.compile(r"(?:^|[\s(])faust -A ([\w.]+)")
KRABKA = re.compile(r"(?:^|[\s(])(?:krabka|python3? -m krabka) ([a-z][\w-]*)")
DOTTED = re.compile(r"^krabka(?:\.\w+)+$")
PATH = re.compile(r"^\.?[\w-]+(?:\.[\w-]+)*(?:/[\w.-]+)*/?$")


def commands_and_spans(markdown: str) -> list[tuple[int, str]]:
    """(line number, text) of every code span, and of every line of a shell block."""
    found = []
    shell: str | None = None
    fence: str | None = None
    for number, line in enumerate(markdown.splitlines(), 1):
        opened = FENCE.match(line)
        if fence is not None:
            if line.strip().startswith(fence) and not line.strip()[3:].strip():
                fence = shell = None
            elif shell:
                found.append((number, line.split("#", 1)[0] if shell != "console" else line))
            continue
        if opened:
            fence = opened.group(2)
            shell = opened.group(3) if opened.group(3) in SHELL_LANGUAGES else None
            continue
        found += [(number, m.group(2).strip()) for m in CODE_SPAN.finditer(line)]
    return found


def reference_problems(page: str, markdown: str, files: set[str], make_targets: set[str],
                       importable: Any, ignored: Any, *, runnable: Any, resolvable: Any,
                       subcommand: Any) -> list[str]:
    """The repository paths, ``python -m`` modules, ``make`` targets, ``faust -A``
    apps, ``krabka`` subcommands and dotted ``krabka.`` names that `markdown`
    (the text of `page`) names and that do not exist.

    `files`: the tracked files; `importable(module)`: whether a module can be
    imported; `runnable(module)`: whether ``python -m`` runs it (a package
    needs a ``__main__``); `resolvable(name)`: whether a dotted name is a
    module or an attribute of one; `subcommand(name)`: whether the operator
    command has that subcommand; `ignored(path)`: whether git ignores the
    path (a file made at run time, ``.cache/...``, or by the user,
    ``deploy/kafka-client.env``: named, not shipped). A path is checked when
    its first part is a top-level entry of the repository (another project's
    path, ``faust/...``, is not), and ``agents/fold/rules.fold`` names
    ``fold`` of ``agents/fold/rules.py``; a bare file name of Python,
    Markdown, TOML, YAML or JSON against every tracked file's name. URL
    paths (``/roles/``), placeholders (``<x>``, ``{x}``,
    ``...``) and globs are not paths.
    """
    folders = {"/".join(f.split("/")[:i]) for f in files for i in range(1, f.count("/") + 1)}
    top = {f.split("/")[0] for f in files}
    names = {f.rsplit("/", 1)[-1] for f in files}
    problems = []
    for number, text in commands_and_spans(markdown):
        where = f"{page}:{number}"
        for module in PYTHON_M.findall(" " + text):
            if not importable(module):
                problems.append(f"{where}: python -m {module}: no such module")
            elif not runnable(module):
                problems.append(f"{where}: python -m {module}: a package without __main__")
        for command in KRABKA.findall(" " + text):
            if not subcommand(command):
                problems.append(f"{where}: krabka {command}: no such subcommand")
        for module in FAUST_A.findall(" " + text):
            if not importable(module):
                problems.append(f"{where}: faust -A {module}: no such module")
        for target in MAKE.findall(" " + text):
            if target not in make_targets:
                problems.append(f"{where}: make {target}: no such target in the Makefile")
        for token in text.split():
            name = token.split("(")[0].strip("'\",;[]:")
            if DOTTED.match(name) and not resolvable(name):
                problems.append(f"{where}: {name}: no such module or attribute")
            token = token.strip("'\",;()[]")
            if not PATH.match(token) or token.startswith(("/", "-")):
                continue
            path = token.rstrip("/")
            first = path.split("/")[0]
            if "/" in path:
                if first not in top or ignored(path):
                    continue
                module = path.rsplit(".", 1)[0] + ".py"
                if path not in files and path not in folders and module not in files:
                    problems.append(f"{where}: {token}: no such file or folder")
            elif (re.search(r"\.(py|md|toml|ya?ml|json)$", path)
                  and path[0] != "." and path not in names):
                problems.append(f"{where}: {token}: no tracked file of that name")
    return problems


def make_targets(makefile: str) -> set[str]:
    """The targets a Makefile defines (``name:`` at the start of a line)."""
    return {m.group(1) for m in re.finditer(r"^([\w-]+)\s*:(?!=)", makefile, re.M)}


# --- running a page ------------------------------------------------------------------


async def run_snippets(page_snippets: Sequence[Snippet]) -> dict[str, Any]:
    """Run the runnable snippets of one page in order, in one namespace, on a
    `MemoryBroker`; then drive the roles they declared. Returns the namespace."""
    import krabka
    import krabka.kafka
    from krabka import defaults
    from krabka.testing import MemoryBroker, MemoryTransport

    broker = MemoryBroker()
    for topic in (defaults.STATE_TOPIC, defaults.TERMS_TOPIC):
        broker.create_topic(topic, defaults.PARTITIONS)
    for topic, partitions in TOPICS.items():
        broker.create_topic(topic, partitions, compacted=False)

    def kafka_transport(*_args: Any, **_kwargs: Any) -> MemoryTransport:
        return MemoryTransport(broker)

    # What a snippet imports as KafkaTransport is a client of the memory broker,
    # for the page's run only: the process's own name comes back afterwards.
    real = krabka.KafkaTransport, krabka.kafka.KafkaTransport
    krabka.KafkaTransport = kafka_transport  # type: ignore[assignment, misc]
    krabka.kafka.KafkaTransport = kafka_transport  # type: ignore[assignment, misc]
    namespace: dict[str, Any] = {"__name__": "__snippet__"}
    try:
        for snippet in page_snippets:
            if snippet.how != "run":
                continue
            code = compile("\n" * (snippet.line - 1) + snippet.code, snippet.page, "exec",
                           flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            if code.co_flags & inspect.CO_COROUTINE:
                await eval(code, namespace)
            else:
                exec(code, namespace)
    finally:
        krabka.KafkaTransport, krabka.kafka.KafkaTransport = real  # type: ignore[misc]
    await _drive_declared_roles(broker, _installations(namespace))
    return namespace


def _installations(namespace: dict[str, Any]) -> list[Any]:
    """The worker installations the page's snippets made or imported (by name):
    only those, never another one alive in the process."""
    install = sys.modules.get("app.install")
    if install is None:
        return []
    found: dict[int, Any] = {}
    for value in namespace.values():
        if isinstance(value, install.Installation):
            found.setdefault(id(value), value)
    return list(found.values())


async def _drive_declared_roles(broker: Any, installations: Sequence[Any]) -> None:
    """Run each role declared on the page's worker `installations` once, as its leader."""
    from krabka import acquire_leadership
    from krabka.testing import MemoryTransport

    for installation in installations:
        settings = installation.context.settings
        for name, function in installation.roles.items():
            outputs = installation.outputs[name]
            for topic in outputs:
                if topic not in broker.topics:
                    broker.create_topic(topic, 3, compacted=False)
            async with MemoryTransport(broker) as transport:
                leadership = await acquire_leadership(
                    transport, name, "docs-snippet", options=settings.role_options(outputs))
                await _until_written_or_returned(broker, name, function(leadership))
                await leadership.resign()


async def _until_written_or_returned(broker: Any, role: str, work: Any) -> None:
    written_before = _written(broker)
    task = asyncio.ensure_future(work)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ROLE_RUN_SECONDS
    while not task.done() and _written(broker) == written_before:
        if loop.time() > deadline:
            task.cancel()
            raise TimeoutError(f"role {role!r} neither wrote nor returned within "
                               f"{ROLE_RUN_SECONDS} s")
        await asyncio.sleep(0.01)
    if task.done():
        task.result()  # its error, if it raised
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _written(broker: Any) -> int:
    """Committed records on the topics the snippets write (not the coordination's)."""
    from krabka import defaults

    total = 0
    for topic in broker.topics:
        if topic in (defaults.STATE_TOPIC, defaults.TERMS_TOPIC):
            continue
        for partition in range(broker.partition_count(topic)):
            total += len(broker.records(topic, partition))
    return total


def run_page_in_subprocess(page: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python -m tests.support.doc_snippets PAGE`` in a fresh interpreter: a page's
    imports (a worker app, Faust's patches) stay out of the test process."""
    return subprocess.run([sys.executable, "-m", "tests.support.doc_snippets", page],
                          cwd=ROOT, env=env, capture_output=True, text=True, check=False,
                          timeout=120)


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.support.doc_snippets PAGE", file=sys.stderr)
        return 2
    page = argv[0]
    try:
        asyncio.run(run_snippets(page_snippets(page)))
    except Exception as exc:
        # The page's own lines first: where in the page the snippet failed.
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == page]
        for frame in frames:
            print(f"{page}:{frame.lineno}: {frame.line}", file=sys.stderr)
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

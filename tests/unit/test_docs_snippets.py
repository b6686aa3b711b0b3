"""The README and docs/ say what the code does: their snippets run, their names exist.

- Every Python snippet of README.md and docs/*.md is checked for undefined
  names and syntax; the runnable ones are run, page by page, on a
  `MemoryBroker` (tests/support/doc_snippets.py says how a snippet is
  marked when it needs a broker or is not run, and what runs it then).
- Every repository path, ``python -m`` module (runnable: a package has a
  ``__main__``), ``faust -A`` app, ``make`` target, ``krabka`` subcommand
  and dotted ``krabka.`` name (a module, or an attribute of one) that the
  pages and the examples' READMEs name in code exists.

docs/decisions/ is left out: its records are history, written against the
code of their day. The last tests feed the checks made-up pages with one
defect each and make sure it is reported.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.doc_snippets import (
    ROOT,
    Snippet,
    SnippetError,
    make_targets,
    page_snippets,
    reference_problems,
    run_page_in_subprocess,
    run_snippets,
    snippets,
    static_problems,
)

PAGES = ["README.md", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))]
RUN_PAGES = [page for page in PAGES if any(s.how == "run" for s in page_snippets(page))]
REFERENCE_PAGES = [*PAGES, *sorted(p.relative_to(ROOT).as_posix()
                                   for p in (ROOT / "examples").rglob("README.md"))]


def _environment() -> dict[str, str]:
    """The process environment without the worker's and Faust's settings: a page's
    snippets run with the defaults a new user has."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("KAFKA_", "COORDINATION_", "BROKER", "WEB_", "APP_"))}


def _importable(module: str) -> bool:
    if module in sys.modules:
        return True  # imported already (Faust's lazy package module has no spec)
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: a module without a spec
        return False


def _runnable(module: str) -> bool:
    """Whether ``python -m module``, an importable module, runs something: a
    package needs a ``__main__``."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):  # ValueError: a module without a spec
        spec = None
    package = (spec.submodule_search_locations is not None if spec is not None
               else hasattr(sys.modules.get(module), "__path__"))
    return not package or _importable(f"{module}.__main__")


def _resolvable(name: str) -> bool:
    """Whether a dotted name is a module, or an attribute (at any depth) of one."""
    parts = name.split(".")
    for length in range(len(parts), 0, -1):
        module = ".".join(parts[:length])
        if _importable(module):
            found: object = importlib.import_module(module)
            for attribute in parts[length:]:
                if not hasattr(found, attribute):
                    return False
                found = getattr(found, attribute)
            return True
    return False


def _logger_names() -> set[str]:
    """The names of the loggers the library and the worker log to (``krabka.leadership``)."""
    return {name for package in ("krabka", "app", "agents", "tables")
            for path in (ROOT / package).rglob("*.py")
            for name in re.findall(r'getLogger\("([\w.]+)"\)', path.read_text())}


def _subcommand(name: str) -> bool:
    """Whether the operator command has subcommand `name`: its ``--help`` exits 0."""
    from krabka.cli.main import main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            main([name, "--help"])
        except SystemExit as exit_:
            return exit_.code == 0
    return False


def _ignored(path: str) -> bool:
    return subprocess.run(["git", "check-ignore", "--quiet", "--no-index", path], cwd=ROOT,
                          check=False).returncode == 0


def _tracked_files() -> set[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True,
                         capture_output=True).stdout
    return {name for name in out.decode().split("\0") if name}


@pytest.mark.parametrize("page", PAGES)
def test_no_snippet_of_the_page_uses_an_undefined_name(page):
    problems = static_problems(page_snippets(page))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", RUN_PAGES)
def test_the_runnable_snippets_of_the_page_run_on_a_memory_broker(page, tmp_path):
    env = {**_environment(), "COORDINATION_DATA_DIR": str(tmp_path / "data")}
    run = run_page_in_subprocess(page, env)
    assert run.returncode == 0, f"{page}'s snippets failed:\n{run.stderr}"


SASL = {"KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "KAFKA_SASL_USERNAME": "worker", "KAFKA_SASL_PASSWORD": "secret"}


def test_the_app_pages_snippets_run_with_a_secured_clusters_settings(tmp_path):
    """Its apps are built from the settings, credentials included, so that
    `install` accepts them wherever the worker runs."""
    env = {**_environment(), **SASL, "COORDINATION_DATA_DIR": str(tmp_path / "data")}
    run = run_page_in_subprocess("docs/app.md", env)
    assert run.returncode == 0, f"docs/app.md's snippets failed on SASL settings:\n{run.stderr}"


def test_the_readme_and_the_app_page_have_no_snippet_left_unchecked():
    """Each of their snippets is run here or by a named integration test."""
    for page in ("README.md", "docs/app.md"):
        for snippet in page_snippets(page):
            assert snippet.how in ("run", "integration"), (
                f"{snippet.where}: marked {snippet.how!r} ({snippet.why})")


@pytest.mark.parametrize("page", PAGES)
def test_every_snippet_marked_integration_is_run_by_the_test_it_names(page):
    for snippet in page_snippets(page):
        if snippet.how != "integration":
            continue
        test = ROOT / snippet.why
        assert test.is_file(), f"{snippet.where}: {snippet.why} is not a file"
        text = test.read_text()
        assert f'snippet_at("{page}", "integration"' in text, (
            f"{snippet.where}: {snippet.why} does not run it (no snippet_at of {page})")


def test_every_path_module_command_and_make_target_the_pages_name_exists():
    files = _tracked_files()
    targets = make_targets((ROOT / "Makefile").read_text())
    loggers = _logger_names()
    problems = []
    for page in REFERENCE_PAGES:
        problems += reference_problems(
            page, (ROOT / page).read_text(), files, targets, _importable, _ignored,
            runnable=_runnable, resolvable=lambda name: name in loggers or _resolvable(name),
            subcommand=_subcommand)
    assert not problems, "\n".join(problems)


# The checks themselves, on made-up pages.


def _page(*blocks: str) -> str:
    return "# Page\n\n" + "\n\n".join(blocks) + "\n"


def test_a_snippet_with_an_undefined_name_fails_the_static_check():
    page = _page("```python\nstatus = describe(role)\nstatus.authoritative(token)\n```")
    assert static_problems(snippets("page.md", page)) == [
        "page.md:4: F821 Undefined name `describe`",
        "page.md:4: F821 Undefined name `role`",
        "page.md:5: F821 Undefined name `token`",
    ]


def test_a_name_defined_by_an_earlier_snippet_of_the_page_is_known_to_a_later_one():
    page = _page("```python\ntoken = 1\n```", "Then:", "```python\nprint(token)\n```")
    assert static_problems(snippets("page.md", page)) == []


def test_a_name_defined_only_by_a_later_snippet_is_undefined():
    page = _page("```python\nprint(token)\n```", "```python\ntoken = 1\n```")
    assert static_problems(snippets("page.md", page)) == [
        "page.md:4: F821 Undefined name `token`"]


def test_top_level_await_is_no_error_but_a_syntax_error_is():
    ok = _page("```python\nimport asyncio\n\nawait asyncio.sleep(0)\n```")
    assert static_problems(snippets("page.md", ok)) == []
    broken = _page("```python\nif True\n    pass\n```")
    [problem] = static_problems(snippets("page.md", broken))
    assert problem.startswith("page.md:4: syntax error")


def test_a_snippet_marked_not_run_is_still_checked_and_a_quotation_only_parsed():
    page = _page("<!-- snippet: not run, needs a database -->\n```python\nconnect(url)\n```",
                 "<!-- snippet: quoted, faust/x.py -->\n```python\nself.wait(x)\n```")
    found = snippets("page.md", page)
    assert [(s.how, s.why) for s in found] == [("not run", "needs a database"),
                                               ("quoted", "faust/x.py")]
    assert static_problems(found) == ["page.md:5: F821 Undefined name `connect`",
                                      "page.md:5: F821 Undefined name `url`"]


@pytest.mark.parametrize("marker", ["<!-- snippet: skipped, why -->",
                                    "<!-- snippet: not run -->"])
def test_an_unknown_or_unexplained_marker_is_an_error(marker):
    with pytest.raises(SnippetError, match=r"page\.md:3"):
        snippets("page.md", _page(f"{marker}\n```python\npass\n```"))


def test_an_unclosed_code_block_is_an_error():
    with pytest.raises(SnippetError, match="never closed"):
        snippets("page.md", _page("```python\npass\n"))


async def test_running_a_snippet_with_an_undefined_name_fails():
    snippet = Snippet("page.md", 3, "x = 1\nprint(token)\n", "run", "")
    with pytest.raises(NameError, match="token"):
        await run_snippets([snippet])


async def test_snippets_run_in_page_order_on_a_memory_broker_standing_for_kafka():
    first = ("from krabka import KafkaTransport, acquire_leadership\n"
             "transport = KafkaTransport('broker:9092')\n"
             "leadership = await acquire_leadership(transport, 'r', 'm')\n")
    second = ("async with leadership.transaction() as txn:\n"
              "    await txn.send('invoices', b'x', partition=0)\n"
              "await leadership.resign()\n")
    namespace = await run_snippets([Snippet("p.md", 3, first, "run", ""),
                                    Snippet("p.md", 9, second, "run", ""),
                                    Snippet("p.md", 15, "raise SystemExit(1)\n", "not run", "x")])
    broker = namespace["transport"].broker
    assert [r.value for r in broker.records("invoices", 0)] == [b"x"]


def test_missing_paths_modules_and_targets_are_reported():
    files = {"README.md", "app/main.py", "deploy/k8s/statefulset.yaml", "docs/app.md"}
    page = (
        "Run `make run`, `make tset`, `python -m app.main`, `python -m app.nope`,\n"
        "`faust -A app.main worker` and `faust -A app.gone worker`. See\n"
        "`app/main.py`, `app/mian.py`, `deploy/k8s/`, `deploy/k9s/`, `deploy/local.env`,\n"
        "`faust/tables/recovery.py`, `/roles/{role}/`, `data/worker-{web_port}`, `main.py`,\n"
        "`statefulset.yaml`, `stateful.yaml`, `app/main.app` and `python deploy/nope.py /ready`.\n"
        "```sh\nmake nothing   # make test\n```\n"
    )
    assert reference_problems("p.md", page, files, {"run", "test"},
                              lambda m: m in {"app", "app.main"},
                              lambda path: path.endswith(".env"), runnable=lambda m: True,
                              resolvable=lambda n: True, subcommand=lambda c: True) == [
        "p.md:1: make tset: no such target in the Makefile",
        "p.md:1: python -m app.nope: no such module",
        "p.md:2: faust -A app.gone: no such module",
        "p.md:3: app/mian.py: no such file or folder",
        "p.md:3: deploy/k9s/: no such file or folder",
        "p.md:5: stateful.yaml: no tracked file of that name",
        "p.md:5: deploy/nope.py: no such file or folder",
        "p.md:7: make nothing: no such target in the Makefile",
    ]


def test_unknown_subcommands_dotted_names_and_packages_without_main_are_reported():
    page = (
        "Run `krabka roles`, `krabka rolse`, `python -m krabka describe r` and\n"
        "`python -m krabka.cli`. See `krabka.acquire.acquire_leadership()` and\n"
        "`krabka.epoch.candidate.acquire_leadership`.\n"
        "```sh\nkrabka watch   # krabka fnce\n```\n"
    )
    assert reference_problems(
        "p.md", page, set(), set(), lambda m: m in {"krabka", "krabka.cli"}, lambda p: False,
        runnable=lambda m: m == "krabka",
        resolvable=lambda n: n != "krabka.epoch.candidate.acquire_leadership",
        subcommand=lambda c: c in {"roles", "describe", "watch"}) == [
        "p.md:1: krabka rolse: no such subcommand",
        "p.md:2: python -m krabka.cli: a package without __main__",
        "p.md:3: krabka.epoch.candidate.acquire_leadership: no such module or attribute",
    ]


def test_the_lookups_read_the_tree_and_the_operator_command():
    assert _runnable("krabka")
    assert not _runnable("krabka.cli")
    assert _runnable("krabka.cli.main")
    assert _resolvable("krabka.acquire.acquire_leadership")
    assert _resolvable("krabka.testing.ManualClock.advance")
    assert not _resolvable("krabka.epoch.candidate.acquire_leadership")
    assert not _resolvable("krabka.nowhere")
    assert _subcommand("roles")
    assert not _subcommand("rolse")


def test_make_targets_are_read_from_the_makefile():
    assert make_targets("run: venv\n\tx\nPY := a\n$(VENV)/x: y\nkafka-up: b\n") == {
        "run", "kafka-up"}


def test_the_checked_pages_are_the_readme_and_docs_but_not_the_decision_records():
    assert {"README.md", "docs/app.md"} <= set(PAGES)
    assert "examples/term_reader/README.md" in REFERENCE_PAGES
    assert not any(page.startswith("docs/decisions/") for page in REFERENCE_PAGES)
    assert all(Path(ROOT / page).is_file() for page in REFERENCE_PAGES)

"""The worker's modules form layers: no import cycle, one composition root.

Read from the source with `ast` (nothing is imported): every ``import`` and
``from ... import`` in the `app`, `agents` and `tables` packages, wherever it
stands in the module (function bodies and ``TYPE_CHECKING`` blocks count),
resolved to the worker module it names.

- No module is part of an import cycle.
- The composition root (`app.install`, which wires the parts onto an app;
  `app.factory`, which builds the project's own app; and `app.main`, which
  builds the worker from the environment) is imported by nothing in
  `agents` or `tables`, nor elsewhere in `app`.
- The context (`app.context`) imports no agent and no table module but the
  agents' own description of what they are given (`agents.context`) and the
  fold's due index; every other worker module it imports (settings, metrics,
  feed, readiness) imports no worker module.
- `agents` and `tables` import nothing of `app`: what they need of the
  composition root comes in as an argument (`agents.context.AgentContext`).
  So the packages, too, form layers: `app` over `agents` and `tables`.
- Only `app.install` wires the parts: the modules that install agents,
  the role service and the web view, and the one that declares the tables,
  are imported by it alone (one wiring path, for the project's app and a
  user's alike).
- A package's ``__init__`` imports no worker module, so importing one module
  never runs another package's modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("app", "agents", "tables")
COMPOSITION_ROOT = {"app.install", "app.factory", "app.main"}
WIRING = "app.install"
CONTEXT = "app.context"
WIRED = {"agents.fold.agent", "agents.service", "app.web.views", "tables.faust_tables"}
AGENTS_OWN = {"agents.context", "agents.fold.due"}
"""What the context may import of the agents: leaves that import no `app` module."""


def _module_files() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if path.stem == "__init__" else parts)
            modules[name] = path
    return modules


MODULES = _module_files()


def _resolve(name: str) -> str | None:
    """The worker module `name` is, or the package holding it; None outside the worker."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _imports(module: str) -> set[str]:
    """The worker modules `module` imports."""
    tree = ast.parse(MODULES[module].read_text(), filename=str(MODULES[module]))
    package = module if MODULES[module].stem == "__init__" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            # ``from app import web`` imports the module app.web.views.
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                     for alias in node.names]
        else:
            continue
        found |= {target for name in names if (target := _resolve(name)) is not None}
    found.discard(module)
    return found


GRAPH = {module: _imports(module) for module in MODULES}


def _cycles() -> list[list[str]]:
    """Every strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(GRAPH[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(GRAPH):
        if node not in index:
            visit(node)
    return components


def importers_of(target: str) -> set[str]:
    return {module for module, imported in GRAPH.items() if target in imported}


def test_the_graph_sees_the_worker_s_modules():
    # A parser that found nothing would pass every check below.
    assert {"app.install", "app.context", "agents.fold.agent",
            "agents.fold.role_value"} <= set(MODULES)
    assert "agents.fold.agent" in GRAPH["app.install"]
    assert "app.web.views" in GRAPH["app.install"]  # ``from app.web import views``


def test_no_worker_module_is_part_of_an_import_cycle():
    assert _cycles() == []


@pytest.mark.parametrize("root", sorted(COMPOSITION_ROOT))
def test_only_the_composition_root_imports_the_composition_root(root):
    assert importers_of(root) <= COMPOSITION_ROOT


def test_the_context_imports_no_agent_and_no_table_module():
    imported = GRAPH[CONTEXT]
    assert {m for m in imported if _package(m) in ("agents", "tables")} <= AGENTS_OWN
    assert {m: GRAPH[m] for m in imported - AGENTS_OWN if GRAPH[m]} == {}
    assert all(_package(m) == "agents" for own in AGENTS_OWN for m in GRAPH[own])


def _package(module: str) -> str:
    return module.split(".")[0]


@pytest.mark.parametrize("package", ["agents", "tables"])
def test_agents_and_tables_import_nothing_of_app(package):
    importing = {module: sorted(m for m in imported if _package(m) == "app")
                 for module, imported in GRAPH.items() if _package(module) == package}
    assert {module: app for module, app in importing.items() if app} == {}


def test_the_worker_s_packages_import_one_another_without_a_cycle():
    between = {(_package(module), _package(m)) for module, imported in GRAPH.items()
               for m in imported if _package(m) != _package(module)}
    assert not {(a, b) for a, b in between if (b, a) in between}, between


@pytest.mark.parametrize("wired", sorted(WIRED))
def test_only_the_installation_wires_agents_tables_and_views(wired):
    assert importers_of(wired) <= {WIRING}


VERSION_GUARDS = {"app": {"app.faust_internals"}}
"""What a package's ``__init__`` may import: the check of its dependency's version,
a leaf that imports no worker module, which must run before anything uses it."""


@pytest.mark.parametrize("package", PACKAGES)
def test_a_package_init_imports_no_worker_module(package):
    allowed = VERSION_GUARDS.get(package, set())
    assert GRAPH[package] <= allowed
    assert all(GRAPH[guard] == set() for guard in allowed)

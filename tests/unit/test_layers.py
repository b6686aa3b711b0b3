"""The library's layers, read from its source with `ast`.

`krabka` is a library other programs depend on: it imports no Faust (nor
``mode``, Faust's service framework, nor ``rocksdict``, the worker's table
store) and none of this repository's worker packages, and only the Kafka
adapter, `krabka.kafka`, imports aiokafka. Inside it (docs/design.md, "The
package's layout"): the record formats and the rules (`format/`, `rules/`) do
no I/O; the two fencing modes (`epoch/`, `term/`) never import each other;
the root's modules do not depend on the Kafka adapter; only tests import the
doubles (`krabka.testing`); no module imports another's private name; and
no import cycle joins library modules. The worker (`app`, `agents`,
`tables`) uses the public API and the subpackages `WORKER_MAY_IMPORT` names.
Every import statement counts, also one inside a function or under
``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "krabka"
ADAPTER = LIBRARY / "kafka"

WORKER_DEPENDENCIES = frozenset({"faust", "mode", "rocksdict"})
WORKER_PACKAGES = frozenset({"app", "agents", "tables", "bench"})


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, package: str) -> set[str]:
    """The absolute names of the modules `source`, a module of `package`, imports."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            prefix = ".".join(parts[: len(parts) - node.level + 1]) if node.level else ""
            names.add(".".join(filter(None, [prefix, node.module])))
    return names


def top_level_imports(paths: list[Path]) -> dict[str, set[str]]:
    """For each module, the top-level packages it imports."""
    result = {}
    for path in paths:
        module = module_name(path)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        result[module] = {name.split(".")[0]
                          for name in imported_modules(path.read_text(), package)}
    return result


def library_modules() -> list[Path]:
    return sorted(LIBRARY.rglob("*.py"))


LIBRARY_MODULES = frozenset(module_name(path) for path in library_modules())


def resolved_imports(source: str, package: str) -> set[tuple[str, str]]:
    """The (module, name) pairs `source`, a module of `package`, imports.

    ``from a import b`` names module ``a.b`` when the library has one (name
    ``*``), else the name ``b`` of module ``a``; ``import a.b`` names module
    ``a.b`` (name ``*``). A package's implicit import of its parents does
    not count: every module would be in a cycle with the root's
    ``__init__``, which re-exports the public API.
    """
    pairs: set[tuple[str, str]] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            pairs.update((alias.name, "*") for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            prefix = ".".join(parts[: len(parts) - node.level + 1]) if node.level else ""
            base = ".".join(filter(None, [prefix, node.module]))
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                pairs.add((submodule, "*") if submodule in LIBRARY_MODULES
                          else (base, alias.name))
    return pairs


def package_of(path: Path) -> str:
    module = module_name(path)
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def imports_of(paths: list[Path]) -> dict[str, set[str]]:
    """For each module, the modules it imports (resolved as `resolved_imports` does)."""
    return {module_name(path): {module for module, _ in
                                resolved_imports(path.read_text(), package_of(path))}
            for path in paths}


def library_imports_of(paths: list[Path]) -> dict[str, set[str]]:
    """For each module, the library modules it imports."""
    return {module: {name for name in names if in_package(name, "krabka")}
            for module, names in imports_of(paths).items()}


def in_package(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def under(*parts: str) -> list[Path]:
    folder = LIBRARY.joinpath(*parts)
    assert folder.is_dir(), f"no package {folder}"
    return sorted(folder.rglob("*.py"))


def offenders(imports: dict[str, set[str]], allowed) -> dict[str, list[str]]:
    """The imports `allowed` refuses, by importing module."""
    refused = {module: sorted(name for name in names if not allowed(name))
               for module, names in imports.items()}
    return {module: names for module, names in refused.items() if names}


def test_the_library_imports_no_faust_mode_or_rocksdict():
    offenders = {module: sorted(names & WORKER_DEPENDENCIES)
                 for module, names in top_level_imports(library_modules()).items()}
    assert {m: names for m, names in offenders.items() if names} == {}


def test_the_library_imports_no_worker_package():
    offenders = {module: sorted(names & WORKER_PACKAGES)
                 for module, names in top_level_imports(library_modules()).items()}
    assert {m: names for m, names in offenders.items() if names} == {}


def test_only_the_kafka_adapter_imports_aiokafka():
    core = [p for p in library_modules() if ADAPTER not in p.parents]
    assert core, "no core module found"
    importers = sorted(module for module, names in top_level_imports(core).items()
                       if "aiokafka" in names)
    assert importers == []


def test_the_kafka_adapter_is_where_aiokafka_is_imported():
    # The rule above is only meaningful while the adapter is the library's aiokafka user.
    adapter = [p for p in library_modules() if ADAPTER in p.parents]
    assert any("aiokafka" in names for names in top_level_imports(adapter).values())


def test_relative_imports_count_as_the_modules_they_name():
    source = "from . import a\nfrom ..b import c\nfrom .d import e\nimport f.g\n"
    assert imported_modules(source, "krabka.kafka") == {
        "krabka.kafka", "krabka.b", "krabka.kafka.d", "f.g"}


def test_importing_the_library_and_its_adapter_loads_no_worker_module():
    probe = (
        "import sys, krabka, krabka.kafka; "
        f"banned = {sorted(WORKER_DEPENDENCIES | WORKER_PACKAGES)!r}; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in banned))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            check=True, cwd=ROOT)
    assert result.stdout.strip() == "[]"


# The standard library modules a format or a rule may use: computation on
# values, nothing that waits, reads a clock, touches a file or a socket.
PURE_STDLIB = frozenset({
    "__future__", "abc", "bisect", "collections", "dataclasses", "enum", "functools",
    "hashlib", "heapq", "itertools", "math", "operator", "re", "struct", "types", "typing",
})
PURE_LIBRARY = ("krabka.format", "krabka.rules", "krabka.errors", "krabka.defaults")


def pure(module: str) -> bool:
    if in_package(module, "krabka"):
        return any(in_package(module, allowed) for allowed in PURE_LIBRARY)
    return module.split(".")[0] in PURE_STDLIB


def test_the_formats_and_the_rules_import_nothing_that_does_io():
    imports = imports_of(under("format") + under("rules"))
    assert imports, "no format or rules module found"
    assert offenders(imports, pure) == {}


def test_epoch_mode_and_term_mode_never_import_each_other():
    epoch = library_imports_of(under("epoch"))
    term = library_imports_of(under("term"))
    assert epoch
    assert term
    assert offenders(epoch, lambda name: not in_package(name, "krabka.term")) == {}
    assert offenders(term, lambda name: not in_package(name, "krabka.epoch")) == {}


def test_the_roots_modules_do_not_depend_on_the_kafka_adapter():
    # The package's __init__ is its public face and names the adapter's
    # transport; the modules it re-exports run on any Transport.
    root = [path for path in LIBRARY.glob("*.py") if path.name != "__init__.py"]
    assert root
    imports = library_imports_of(root)
    assert offenders(imports, lambda name: not in_package(name, "krabka.kafka")) == {}


def test_only_the_doubles_themselves_import_the_testing_package():
    doubles = LIBRARY / "testing"
    imports = library_imports_of([path for path in library_modules()
                                  if doubles not in path.parents])
    assert offenders(imports, lambda name: not in_package(name, "krabka.testing")) == {}


def test_no_library_module_imports_a_private_name_of_another():
    private = {}
    for path in library_modules():
        names = sorted(f"{module}.{name}" for module, name in
                       resolved_imports(path.read_text(), package_of(path))
                       if in_package(module, "krabka") and name.startswith("_")
                       and not name.startswith("__"))
        if names:
            private[module_name(path)] = names
    assert private == {}


def import_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of `graph` (its modules in import order, the first repeated), or []."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(module: str) -> list[str]:
        state[module] = "open"
        path.append(module)
        for name in sorted(graph.get(module, ())):
            if state.get(name) == "open":
                return [*path[path.index(name):], name]
            if name not in state and (found := visit(name)):
                return found
        state[module] = "done"
        path.pop()
        return []

    for module in sorted(graph):
        if module not in state and (found := visit(module)):
            return found
    return []


def test_no_import_cycle_joins_library_modules():
    graph = library_imports_of(library_modules())
    assert import_cycle(graph) == []


def test_the_cycle_search_finds_a_cycle_through_several_modules():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert import_cycle(graph) == ["a", "b", "c", "a"]
    assert import_cycle({"a": {"b"}, "b": set()}) == []


def test_a_from_import_of_a_module_names_that_module():
    pairs = resolved_imports("from krabka import defaults, Leadership\n"
                             "from krabka.tenure import _private\n", "krabka.epoch")
    assert pairs == {("krabka.defaults", "*"), ("krabka", "Leadership"),
                     ("krabka.tenure", "_private")}


# What the worker imports of the library beyond the public API (`krabka`):
# a module by its name, or a subpackage with its own modules (not the
# packages nested in it, which are that subpackage's business).
WORKER_MAY_IMPORT_MODULES = {
    "krabka": "the public API",
    "krabka.defaults": "the topics' names and the defaults its settings start from",
    "krabka.errors": "the error tree, and which errors are retryable",
    "krabka.options": "the fencing modes its settings check",
    "krabka.clock": "the system clock its runners and tick timer share",
    "krabka.transport": "the transport seam's protocols its rebalancing reads through",
    "krabka.health": "the leadership health its liveness answers with",
}
WORKER_MAY_IMPORT = {
    "krabka.format": "the record formats and partitioning its fold decodes with",
    "krabka.kafka": "the Kafka transport, connection settings and the ACL check",
    "krabka.observe": "the leadership events and JSON forms its web views serve",
    "krabka.rules": "the placement check of its settings",
    "krabka.term": "the term fold its state agent runs",
    "krabka.scale": "the admission and the heap settler its agents run",
    "krabka.runtime": "cancellation helpers and the dependency ranges it checks",
}


def worker_may_import(module: str) -> bool:
    if not in_package(module, "krabka") or module in WORKER_MAY_IMPORT_MODULES:
        return True
    return any(module == package or module.rpartition(".")[0] == package
               for package in WORKER_MAY_IMPORT)


def test_the_worker_imports_the_public_api_and_the_allowed_subpackages_only():
    worker = sorted(path for package in ("app", "agents", "tables")
                    for path in (ROOT / package).rglob("*.py"))
    assert worker
    assert offenders(imports_of(worker), worker_may_import) == {}


def test_the_worker_allow_list_admits_no_nested_package_nor_the_doubles():
    assert not worker_may_import("krabka.kafka.producer.fenced")
    assert not worker_may_import("krabka.testing")
    assert not worker_may_import("krabka.guarded")
    assert worker_may_import("krabka.kafka.connection")

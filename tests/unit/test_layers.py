"""The library's layers, read from its source with `ast`.

`krabka` is a library other programs depend on: it imports no Faust (nor
``mode``, Faust's service framework, nor ``rocksdict``, the worker's table
store) and none of this repository's worker packages, and only the Kafka
adapter, `krabka.kafka`, imports aiokafka. Every import statement counts,
also one inside a function or under ``TYPE_CHECKING``.
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

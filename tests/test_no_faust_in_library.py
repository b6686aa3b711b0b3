"""The library stays importable without Faust: nothing under coordination/ imports it."""

import ast
import subprocess
import sys
from pathlib import Path

LIBRARY = Path(__file__).resolve().parent.parent / "coordination"


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_no_module_under_coordination_imports_faust():
    offenders = {
        str(path.relative_to(LIBRARY.parent)): sorted(
            name for name in imported_modules(path) if name.split(".")[0] in {"faust", "mode"}
        )
        for path in LIBRARY.rglob("*.py")
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_importing_the_library_loads_no_faust_module():
    probe = (
        "import sys, coordination; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('faust', 'mode')))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"

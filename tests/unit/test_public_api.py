"""The package root is a small public API, and importing it costs no Kafka client.

`krabka.__all__` holds the names a program calls (at most 40); everything
else is imported from its subpackage. ``import krabka`` loads only the
library and the standard library: the Kafka adapter (and aiokafka with it)
loads when `KafkaTransport` or `Connection` is first named. The README, the
docs and the examples use only names that exist where they say.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import krabka

ROOT = Path(__file__).resolve().parents[2]
LAZY = ("Connection", "KafkaTransport")
MAX_ROOT_NAMES = 40

SUBMODULES = frozenset(
    path.stem for path in (ROOT / "krabka").iterdir()
    if not path.name.startswith("_") and (path.is_dir() or path.suffix == ".py")
)
"""The names `krabka.<name>` may mean besides the root's own: its subpackages and modules."""

PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
NAMED = re.compile(r"\bkrabka\.([A-Za-z_]\w*)")


def fresh_interpreter(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, cwd=ROOT)
    return result.stdout.strip()


def test_importing_the_package_loads_no_aiokafka():
    assert fresh_interpreter("import krabka, sys; print('aiokafka' in sys.modules)") == "False"


def test_importing_the_package_loads_only_the_library_and_the_standard_library():
    probe = (
        "import sys; before = set(sys.modules); import krabka; "
        "print(sorted(m for m in set(sys.modules) - before "
        "if m.split('.')[0] not in sys.stdlib_module_names and m.split('.')[0] != 'krabka'))"
    )
    assert fresh_interpreter(probe) == "[]"


def test_importing_the_package_leaves_the_collector_and_logging_as_they_were():
    probe = (
        "import gc, json, logging, sys; "
        "seen = lambda: [gc.get_threshold(), gc.get_freeze_count(), gc.isenabled(), "
        "[type(h).__name__ for h in logging.getLogger().handlers], "
        "logging.getLogger().level, len(sys.meta_path), len(sys.path_hooks)]; "
        "before = seen(); import krabka; print(json.dumps([before, seen()]))"
    )
    before, after = json.loads(fresh_interpreter(probe))
    assert after == before


def test_naming_the_kafka_transport_loads_the_adapter():
    probe = (
        "import sys, krabka; from krabka import KafkaTransport; "
        "import krabka.kafka; "
        "print(KafkaTransport is krabka.kafka.KafkaTransport, 'aiokafka' in sys.modules)"
    )
    assert fresh_interpreter(probe) == "True True"


def test_the_root_exports_at_most_forty_names():
    assert len(krabka.__all__) <= MAX_ROOT_NAMES
    assert len(set(krabka.__all__)) == len(krabka.__all__)


@pytest.mark.parametrize("name", sorted(krabka.__all__))
def test_every_exported_name_resolves(name):
    assert getattr(krabka, name) is not None


def test_the_adapter_names_are_exported_and_listed_by_dir():
    assert set(LAZY) <= set(krabka.__all__)
    assert set(krabka.__all__) <= set(dir(krabka))


def test_a_name_the_root_does_not_export_is_an_attribute_error():
    with pytest.raises(AttributeError, match="MemoryTransport"):
        _ = krabka.MemoryTransport
    with pytest.raises(ImportError):
        from krabka import encode_key  # noqa: F401


def documented_python() -> dict[str, str]:
    """The Python a reader copies: the README's and docs' snippets, the examples' files."""
    sources = {}
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
                 *sorted((ROOT / "examples").rglob("*.md"))]:
        for number, block in enumerate(PYTHON_BLOCK.findall(page.read_text(encoding="utf-8"))):
            sources[f"{page.relative_to(ROOT)}#{number}"] = block
    for path in sorted((ROOT / "examples").rglob("*.py")):
        sources[str(path.relative_to(ROOT))] = path.read_text(encoding="utf-8")
    return sources


def root_names_used(source: str) -> set[str]:
    """What `source` takes from the package root: ``from krabka import X`` and ``krabka.X``."""
    used = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == "krabka" and not node.level:
            used.update(alias.name for alias in node.names)
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.value.id == "krabka"):
            used.add(node.attr)
    return used


def test_the_documented_code_takes_from_the_root_only_what_it_exports():
    sources = documented_python()
    assert any("from krabka import" in source for source in sources.values())
    wrong = {where: sorted(names)
             for where, source in sources.items()
             if (names := root_names_used(source) - set(krabka.__all__) - SUBMODULES)}
    assert wrong == {}


def test_the_readme_and_examples_name_root_attributes_that_exist():
    texts = {"README.md": (ROOT / "README.md").read_text(encoding="utf-8")}
    for path in sorted((ROOT / "examples").rglob("*")):
        if path.suffix in (".md", ".py"):
            texts[str(path.relative_to(ROOT))] = path.read_text(encoding="utf-8")
    wrong = {where: sorted(names) for where, text in texts.items()
             if (names := set(NAMED.findall(text)) - set(krabka.__all__) - SUBMODULES)}
    assert wrong == {}


def test_the_root_names_used_are_found_in_code_and_prose():
    source = "import krabka\nfrom krabka import A, defaults\nx = krabka.B\n"
    assert root_names_used(source) == {"A", "defaults", "B"}
    assert NAMED.findall("use `krabka.C` or ``krabka.term.seed``") == ["C", "term"]

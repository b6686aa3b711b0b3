"""Only `krabka.kafka.aiokafka_internals` reaches into aiokafka's internals.

Every other module of the library is scanned with `ast`. What counts as a
private use of aiokafka, the rule this test enforces:

* an import of a private name or module from aiokafka
  (``from aiokafka.x import _y``, ``import aiokafka._x``);
* a private attribute of a name bound to an aiokafka module
  (``from aiokafka import errors as _errors`` then ``_errors._x``);
* a private attribute (``._x``, not a dunder) whose name aiokafka's installed
  source defines or reads (a ``def``, a class, an assignment, an attribute),
  unless the scanned module itself defines that name (its own classes'
  attributes and methods), or, read off ``self`` or ``cls``, a module of the
  library does (a base class of ours): a subclass of an aiokafka class
  written outside the shim is caught;
* a private attribute that no module of the library defines at all: it can
  only be a dependency's.

A name both aiokafka and the scanned module define is taken to be the
module's own: the test cannot tell the two apart without types.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import aiokafka
import pytest

import krabka
import krabka.kafka.aiokafka_internals as shim
from krabka.kafka.aiokafka_internals import GROUPS, INTERNALS

LIBRARY = Path(krabka.__file__).resolve().parent
SHIM = Path(shim.__file__).resolve()
SCANNED = sorted(p for p in LIBRARY.rglob("*.py") if p.resolve() != SHIM)


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def defined_names(tree: ast.AST) -> set[str]:
    """The names `tree` defines: functions, classes, assigned names and attributes."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)  # __slots__ entries
    return {name for name in names if private(name)}


def aiokafka_private_names() -> frozenset[str]:
    """Every private name aiokafka's installed source defines or reads as an attribute."""
    names: set[str] = set()
    for path in Path(aiokafka.__file__).resolve().parent.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        names |= defined_names(tree)
        names |= {node.attr for node in ast.walk(tree)
                  if isinstance(node, ast.Attribute) and private(node.attr)}
    return frozenset(names)


AIOKAFKA_PRIVATE = aiokafka_private_names()
LIBRARY_OWN = frozenset().union(*(defined_names(ast.parse(p.read_text(encoding="utf-8")))
                                  for p in SCANNED))


def aiokafka_module_names(tree: ast.AST) -> set[str]:
    """Names bound to an aiokafka module (``import aiokafka``, ``from aiokafka import errors``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "aiokafka":
                    names.add(alias.asname or alias.name.split(".")[0])
        elif (isinstance(node, ast.ImportFrom) and node.module
              and node.module.split(".")[0] == "aiokafka"):
            for alias in node.names:
                if alias.name[:1].islower():  # a module, by aiokafka's naming
                    names.add(alias.asname or alias.name)
    return names


def private_aiokafka_uses(source: str) -> list[str]:
    """The private uses of aiokafka in `source`, by the module docstring's rule."""
    tree = ast.parse(source)
    own = defined_names(tree)
    modules = aiokafka_module_names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and (
                node.module.split(".")[0] == "aiokafka"):
            parts = [*node.module.split("."), *(alias.name for alias in node.names)]
            found += [f"{node.lineno}: from {node.module} import {part}"
                      for part in parts if private(part)]
        elif isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {alias.name}" for alias in node.names
                      if alias.name.split(".")[0] == "aiokafka"
                      and any(private(part) for part in alias.name.split("."))]
        elif isinstance(node, ast.Attribute) and private(node.attr):
            receiver = node.value
            on_self = isinstance(receiver, ast.Name) and receiver.id in {"self", "cls"}
            if isinstance(receiver, ast.Name) and receiver.id in modules:
                found.append(f"{node.lineno}: {ast.unparse(node)} (an aiokafka module's)")
            elif node.attr in AIOKAFKA_PRIVATE and node.attr not in (
                    own | LIBRARY_OWN if on_self else own):
                found.append(f"{node.lineno}: {ast.unparse(node)} (aiokafka defines it)")
            elif node.attr not in own | LIBRARY_OWN:
                found.append(f"{node.lineno}: {ast.unparse(node)} (the library does not define it)")
    return found


def test_aiokafka_s_private_names_are_found_in_its_source():
    assert {"_txn_manager", "_sender", "_fetcher", "_proc_fetch_request",
            "_coordinators"} <= AIOKAFKA_PRIVATE


@pytest.mark.parametrize("path", SCANNED, ids=lambda p: str(p.relative_to(LIBRARY.parent)))
def test_no_module_but_the_shim_reaches_into_aiokafka_s_internals(path):
    assert private_aiokafka_uses(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("source", [
    "from aiokafka.producer.sender import _private_helper\n",
    "import aiokafka._internal\n",
    "from aiokafka import errors as _errors\n_errors._hidden_table\n",
    "def close(producer):\n    producer._txn_manager.state\n",
    "def close(consumer):\n    consumer._fetcher\n",
    "class Mine(Base):\n    def go(self):\n        return self._sender\n",
    "class Mine(Base):\n    def go(self):\n        return self._md_synchronizer\n",
    "def peek(obj):\n    return obj._name_nobody_defines\n",
])
def test_a_private_use_of_aiokafka_is_found(source):
    assert private_aiokafka_uses(source) != []


@pytest.mark.parametrize("source", [
    "class Own:\n    def __init__(self):\n        self._sender = None\n"
    "    def go(self, other):\n        return other._sender\n",
    "from aiokafka import errors as _errors\n_errors.KafkaError\n",
    "def name(obj):\n    return obj.__class__.__name__\n",
])
def test_the_module_s_own_private_names_and_public_ones_pass(source):
    assert private_aiokafka_uses(source) == []


def test_the_listed_internals_are_what_the_shim_s_functions_declare():
    declared = [name for names in GROUPS.values() for name in names]
    assert set(INTERNALS) == set(declared)
    assert len(INTERNALS) == len(set(INTERNALS))
    assert all(names for names in GROUPS.values())


ERROR_TABLE_PROBE = """
from aiokafka.errors import UnknownError, for_code
import krabka.kafka
from krabka.kafka.protocol.messages import ProducerFencedError, TransactionalIdNotFoundError
assert for_code(90) is UnknownError and for_code(105) is UnknownError, "changed at import"
krabka.kafka.KafkaTransport("localhost:9")
assert for_code(90) is ProducerFencedError and for_code(105) is TransactionalIdNotFoundError
krabka.kafka.KafkaTransport("localhost:9")
assert for_code(90) is ProducerFencedError and for_code(105) is TransactionalIdNotFoundError
"""


def test_aiokafka_s_error_table_learns_codes_90_and_105_when_a_transport_is_created():
    # A process of its own: the table is global, and this one's tests create transports.
    done = subprocess.run([sys.executable, "-c", ERROR_TABLE_PROBE], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr


def test_extending_the_error_table_keeps_the_class_aiokafka_has():
    from aiokafka.errors import InvalidProducerEpoch, for_code

    class Other(Exception):
        pass

    shim.extend_error_table({InvalidProducerEpoch.errno: Other})
    assert for_code(InvalidProducerEpoch.errno) is InvalidProducerEpoch

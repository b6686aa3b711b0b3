"""Every non-public aiokafka and Faust name the code relies on exists in the installed versions.

The names are listed once, beside the tested version ranges
(`krabka.kafka.aiokafka_internals`, `app.faust_internals`, and the
worker's changes to Faust in `app.faust_changes.registry`). An attribute
counts as present when the object has it, or when a method of the class (or of
a base class) assigns it on ``self``: most of them are instance attributes that
exist only once a client was built. A scan of the source then checks the list
is complete for the common case, a private attribute read off another object.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
from pathlib import Path

import pytest

from app.faust_changes.registry import INTERNALS as CHANGES_INTERNALS
from app.faust_internals import INTERNALS as FAUST_INTERNALS
from krabka.kafka.aiokafka_internals import INTERNALS as AIOKAFKA_INTERNALS

ROOT = Path(__file__).resolve().parents[2]
LISTED = AIOKAFKA_INTERNALS + FAUST_INTERNALS + CHANGES_INTERNALS
# Code that reaches into aiokafka or Faust.
SCANNED = [*sorted((ROOT / "krabka" / "kafka").rglob("*.py")),
           *(sorted(p for d in ("app", "agents", "tables") for p in (ROOT / d).rglob("*.py"))),
           ROOT / "tests" / "app" / "faust_seek_check.py"]
# Public despite the underscore.
PUBLIC = frozenset({"_exit"})  # os._exit


def assigned_on_self(cls: type) -> set[str]:
    """The attributes the methods of `cls` assign on ``self``, and its annotated names."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # a class written in C
        return set()
    names = set()
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name) and node.value.id == "self"):
            names.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def exists(entry: str) -> bool:
    """Whether ``"module:Object.attribute"`` (or ``"module:name"``) names something."""
    module_name, _, path = entry.partition(":")
    try:
        owner = importlib.import_module(module_name)
    except ImportError:
        return False
    *owners, attribute = path.split(".")
    for name in owners:
        owner = getattr(owner, name, None)
        if owner is None:
            return False
    if hasattr(owner, attribute):
        return True
    return isinstance(owner, type) and any(
        attribute in assigned_on_self(cls) for cls in owner.__mro__ if cls is not object)


@pytest.mark.parametrize("entry", LISTED)
def test_the_listed_internal_exists_in_the_installed_version(entry):
    assert exists(entry), f"{entry} is gone: check what replaced it before widening the range"


@pytest.mark.parametrize("entry", [
    "aiokafka.producer.producer:AIOKafkaProducer._no_such_attribute",
    "aiokafka.producer.producer:NoSuchClass._txn_manager",
    "aiokafka.no_such_module:name",
    "faust.tables.recovery:Recovery._no_such_method",
])
def test_a_renamed_internal_is_reported_missing(entry):
    assert not exists(entry)


def test_instance_attributes_count_when_a_method_assigns_them():
    # Set in AIOKafkaProducer.__init__ only, so absent from the class itself.
    from aiokafka.producer.producer import AIOKafkaProducer
    assert not hasattr(AIOKafkaProducer, "_txn_manager")
    assert exists("aiokafka.producer.producer:AIOKafkaProducer._txn_manager")


def private_reads_off_other_objects(path: Path) -> set[str]:
    """Private attributes `path` reads off an object that is not ``self``, and not
    defined in `path` itself (those are its own)."""
    tree = ast.parse(path.read_text(), str(path))
    own = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            own.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
              and isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"}):
            own.add(node.attr)
    return {
        node.attr for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr.startswith("_")
        and not node.attr.startswith("__") and node.attr not in own | PUBLIC
        and not (isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"})
    }


def test_every_private_attribute_read_off_a_dependency_object_is_listed():
    listed = {entry.rpartition(".")[2].rpartition(":")[2] for entry in LISTED}
    unlisted = {str(path.relative_to(ROOT)): sorted(private_reads_off_other_objects(path) - listed)
                for path in SCANNED}
    assert {path: names for path, names in unlisted.items() if names} == {}


def test_the_suite_timeout_plugin_finds_what_it_uses_in_the_installed_pytest_timeout():
    """tests/support/timeout_cleanup.py calls pytest-timeout's thread-method exit and its
    debugger test, and sets the attribute its cancel hook reads: none is a documented hook."""
    import importlib.metadata

    import pytest_timeout

    from tests.support.timeout_cleanup import CHECKED_VERSION

    assert importlib.metadata.version("pytest-timeout") == CHECKED_VERSION
    assert callable(pytest_timeout.timeout_timer)
    assert callable(pytest_timeout.is_debugging)
    assert '"cancel_timeout"' in inspect.getsource(pytest_timeout.pytest_timeout_cancel_timer)

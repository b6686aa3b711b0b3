"""The dependency versions the project was tested with: declared once, refused otherwise.

`krabka.kafka` refuses an aiokafka, and the worker (`app`) a
faust-streaming, outside the range the suite ran against, with a typed error
naming the override variable; with the variable set to ``1`` they warn instead.
``pyproject.toml`` requires the same ranges, so pip installs only what the
import accepts.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tomllib
from pathlib import Path

import aiokafka
import faust
import pytest
from packaging.requirements import Requirement

from app.faust_internals import FAUST, MODE
from krabka import CoordinationError
from krabka.errors import UntestedVersionError
from krabka.kafka.aiokafka_internals import AIOKAFKA
from krabka.runtime.versions import DependencyRange, UntestedVersionWarning

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
RANGE = DependencyRange("dep", ">=1.2.0,<1.3", "ALLOW_UNTESTED_DEP")


@pytest.mark.parametrize("version", ["1.2.0", "1.2.7", "1.2"])
def test_a_release_in_the_range_is_tested(version):
    assert RANGE.covers(version)


@pytest.mark.parametrize("version", ["1.1.9", "1.3.0", "2.0", "1.2.1rc1", "1.2.1.dev0", "nonsense"])
def test_releases_outside_the_range_prereleases_and_garbage_are_untested(version):
    assert not RANGE.covers(version)


def test_an_untested_version_is_refused_with_a_typed_error_naming_the_override():
    with pytest.raises(UntestedVersionError) as caught:
        RANGE.require("1.3.0", environ={})
    assert isinstance(caught.value, CoordinationError)
    assert isinstance(caught.value, ImportError)
    message = str(caught.value)
    assert "dep 1.3.0 is installed" in message
    assert "dep>=1.2.0,<1.3" in message
    assert "ALLOW_UNTESTED_DEP=1" in message


def test_the_override_turns_the_refusal_into_a_warning():
    with pytest.warns(UntestedVersionWarning, match="dep 1.3.0 is installed"):
        RANGE.require("1.3.0", environ={"ALLOW_UNTESTED_DEP": "1"})


@pytest.mark.parametrize("value", ["", "0", "true"])
def test_only_the_value_1_overrides(value):
    with pytest.raises(UntestedVersionError):
        RANGE.require("1.3.0", environ={"ALLOW_UNTESTED_DEP": value})


def test_a_tested_version_passes_silently(recwarn):
    RANGE.require("1.2.3", environ={})
    assert not recwarn.list


def test_the_installed_aiokafka_faust_and_mode_are_tested_versions():
    assert AIOKAFKA.covers(aiokafka.__version__)
    assert FAUST.covers(faust.__version__)
    assert MODE.covers(importlib.metadata.version("mode-streaming"))


def declared(requirements: list[str], name: str) -> Requirement:
    (found,) = [r for r in map(Requirement, requirements) if r.name == name]
    return found


def test_pyproject_requires_the_aiokafka_range_the_adapter_accepts():
    assert str(declared(PYPROJECT["dependencies"], "aiokafka").specifier) == str(
        Requirement(AIOKAFKA.requirement).specifier)


def test_pyproject_worker_extra_requires_the_faust_range_the_worker_accepts():
    faust_requirement = declared(PYPROJECT["optional-dependencies"]["worker"], "faust-streaming")
    assert str(faust_requirement.specifier) == str(Requirement(FAUST.requirement).specifier)


def test_pyproject_worker_extra_requires_the_mode_range_the_worker_accepts():
    mode_requirement = declared(PYPROJECT["optional-dependencies"]["worker"], "mode-streaming")
    assert str(mode_requirement.specifier) == str(Requirement(MODE.requirement).specifier)


def import_with_version(module: str, dependency: str, version: str, **env: str):
    probe = (f"import {dependency}; {dependency}.__version__ = {version!r}; import {module}; "
             "print('imported')")
    return subprocess.run([sys.executable, "-W", "always::UserWarning", "-c", probe],
                          capture_output=True, text=True, cwd=ROOT, env={"PATH": "", **env},
                          timeout=120)


def test_importing_the_kafka_adapter_refuses_an_untested_aiokafka():
    result = import_with_version("krabka.kafka", "aiokafka", "0.13.0")
    assert result.returncode != 0
    assert "UntestedVersionError: aiokafka 0.13.0 is installed" in result.stderr
    assert "COORDINATION_ALLOW_UNTESTED_AIOKAFKA=1" in result.stderr


def test_the_kafka_adapter_imports_an_untested_aiokafka_with_a_warning_when_allowed():
    result = import_with_version("krabka.kafka", "aiokafka", "0.13.0",
                                 COORDINATION_ALLOW_UNTESTED_AIOKAFKA="1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "imported"
    assert "UntestedVersionWarning: aiokafka 0.13.0 is installed" in result.stderr


def test_importing_the_worker_refuses_an_untested_faust():
    result = import_with_version("app", "faust", "0.15.4")
    assert result.returncode != 0
    assert "UntestedVersionError: faust-streaming 0.15.4 is installed" in result.stderr
    assert "COORDINATION_ALLOW_UNTESTED_FAUST=1" in result.stderr


def test_the_worker_imports_an_untested_faust_with_a_warning_when_allowed():
    result = import_with_version("app", "faust", "0.15.4", COORDINATION_ALLOW_UNTESTED_FAUST="1")
    assert result.returncode == 0, result.stderr
    assert "UntestedVersionWarning: faust-streaming 0.15.4 is installed" in result.stderr


def import_with_distribution_version(module: str, distribution: str, version: str, **env: str):
    """Import `module` where the installed `distribution` reports `version` (a package
    whose ``__version__`` is not its release, like mode-streaming's, is read from
    its metadata)."""
    probe = ("import importlib.metadata as metadata; real = metadata.version; "
             f"metadata.version = lambda name: {version!r} if name == {distribution!r} "
             f"else real(name); import {module}; print('imported')")
    return subprocess.run([sys.executable, "-W", "always::UserWarning", "-c", probe],
                          capture_output=True, text=True, cwd=ROOT, env={"PATH": "", **env},
                          timeout=120)


def test_importing_the_worker_refuses_an_untested_mode():
    result = import_with_distribution_version("app", "mode-streaming", "0.7.2")
    assert result.returncode != 0
    assert "UntestedVersionError: mode-streaming 0.7.2 is installed" in result.stderr
    assert "COORDINATION_ALLOW_UNTESTED_FAUST=1" in result.stderr


def test_the_worker_imports_an_untested_mode_with_a_warning_when_allowed():
    result = import_with_distribution_version("app", "mode-streaming", "0.7.2",
                                              COORDINATION_ALLOW_UNTESTED_FAUST="1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "imported"
    assert "UntestedVersionWarning: mode-streaming 0.7.2 is installed" in result.stderr

"""What ``pip install krabka-coordination`` installs: the library and nothing else.

The wheel is built once from a copy of the working tree as a clone has it,
then installed with its dependencies from PyPI into a fresh virtualenv, whose
interpreter runs isolated (no PYTHONPATH, no checkout on ``sys.path``). The
library and its Kafka adapter import there without faust-streaming or
rocksdict, and site-packages holds none of the repository's worker packages,
whose names belong to other distributions (``tables`` is PyTables').
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import venv
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement

pytestmark = pytest.mark.install

ROOT = Path(__file__).resolve().parents[2]
WORKER_PACKAGES = ("app", "agents", "tables", "bench")
WORKER_DEPENDENCIES = ("faust", "mode", "rocksdict", "orjson")
# What a clone does not have (.gitignore), and the git directory.
NOT_IN_A_CLONE = shutil.ignore_patterns(
    ".git", ".venv", ".cache", "__pycache__", "*.egg-info", ".pytest_cache", ".mypy_cache",
    ".ruff_cache", "build", "dist", "test-artifacts", "data")


def run(*args: str | Path, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, check=True,
                          timeout=300, **kwargs)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    shutil.copytree(ROOT, source, ignore=NOT_IN_A_CLONE, symlinks=True)
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", work / "dist", source)
    (built,) = (work / "dist").glob("*.whl")
    return built


@pytest.fixture(scope="module")
def python(wheel, tmp_path_factory) -> Path:
    """The interpreter of a fresh virtualenv with the wheel and its dependencies installed."""
    env_dir = tmp_path_factory.mktemp("venv")
    venv.create(env_dir, with_pip=False)
    interpreter = env_dir / "bin" / "python"
    run(sys.executable, "-m", "pip", "--python", interpreter, "install", "--quiet",
        "--disable-pip-version-check", wheel)
    return interpreter


def isolated(python: Path, code: str) -> subprocess.CompletedProcess[str]:
    # -I: no PYTHONPATH, no user site, no current directory on sys.path.
    return run(python, "-I", "-c", code, cwd=python.parent)


def test_the_wheel_holds_the_library_and_its_type_marker_only(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/")[0] for name in names}
    assert top_level == {"krabka", "krabka_coordination-0.1.0.dist-info"}
    assert "krabka/py.typed" in names
    assert "krabka/kafka/__init__.py" in names


def test_the_wheel_requires_aiokafka_and_packaging_and_the_worker_is_an_extra(wheel):
    with zipfile.ZipFile(wheel) as archive:
        metadata = Parser().parsestr(
            archive.read("krabka_coordination-0.1.0.dist-info/METADATA").decode())
    requirements = [Requirement(r) for r in metadata.get_all("Requires-Dist")]
    assert {r.name for r in requirements if r.marker is None} == {"aiokafka", "packaging"}
    worker = {r.name for r in requirements if r.marker and r.marker.evaluate({"extra": "worker"})
              and not r.marker.evaluate({"extra": ""})}
    assert {"faust-streaming", "rocksdict"} <= worker
    assert metadata["Requires-Python"] == ">=3.11"


def test_the_library_and_its_kafka_adapter_import_without_the_worker_dependencies(python):
    probe = isolated(python, (
        "import importlib.util, json, krabka, krabka.kafka; "
        "print(json.dumps({'file': krabka.__file__, 'found': ["
        f"n for n in {WORKER_DEPENDENCIES!r} if importlib.util.find_spec(n)]}}))"
    ))
    result = json.loads(probe.stdout)
    assert Path(result["file"]).is_relative_to(python.parent.parent), result["file"]
    assert result["found"] == []


def test_site_packages_holds_no_worker_package(python):
    probe = isolated(python, (
        "import importlib.util, json, sysconfig; "
        "print(json.dumps({'site': sysconfig.get_paths()['purelib'], 'found': ["
        f"n for n in {WORKER_PACKAGES!r} if importlib.util.find_spec(n)]}}))"
    ))
    result = json.loads(probe.stdout)
    assert result["found"] == []
    present = {p.name.removesuffix(".py") for p in Path(result["site"]).iterdir()}
    assert present.isdisjoint(WORKER_PACKAGES)
    assert "krabka" in present


def test_the_console_script_is_installed(python):
    result = run(python.parent / "krabka", "--help", cwd=python.parent)
    assert "usage" in result.stdout.lower()


def test_importing_the_installed_package_imports_no_aiokafka(python):
    probe = isolated(python, "import krabka, sys; print('aiokafka' in sys.modules)")
    assert probe.stdout == "False\n"


def test_nothing_installed_is_named_coordination(python):
    probe = isolated(python, (
        "import importlib.util, json, sysconfig; "
        "print(json.dumps({'site': sysconfig.get_paths()['purelib'], "
        "'found': importlib.util.find_spec('coordination') is not None}))"
    ))
    result = json.loads(probe.stdout)
    assert result["found"] is False
    installed = [*Path(result["site"]).iterdir(), *python.parent.iterdir()]
    assert not [p.name for p in installed if "coordination" in p.name
                and not p.name.startswith("krabka_coordination")]

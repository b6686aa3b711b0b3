"""``COORDINATION_ROLES_MODULES``: the project's worker (`app.main`) imports the
modules it names, and the roles they declare on its installation are the
worker's, so an image with a roles module of its own runs the stock command
and manifests (docs/deploy.md#your-own-roles)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.settings import Settings

ROOT = Path(__file__).resolve().parents[2]

ROLES_MODULE = '''
from app.main import installation


@installation.role("acme.billing-scheduler", outputs=["invoices"])
async def schedule(leadership):
    pass
'''


def _import_app_main(tmp_path: Path, modules: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COORDINATION_")}
    env.update({"PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)]),
                "COORDINATION_ROLES_MODULES": modules,
                "COORDINATION_DATA_DIR": str(tmp_path / "data")})
    code = ("import app.main as m; "
            "print(sorted((name, m.installation.outputs[name]) for name in m.installation.roles))")
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_the_setting_is_a_comma_separated_list_of_module_names():
    env = {"COORDINATION_ROLES_MODULES": " acme.roles, more_roles ,"}
    assert Settings.from_env(env).role_modules == ("acme.roles", "more_roles")
    assert Settings.from_env({}).role_modules == ()


@pytest.mark.parametrize("modules", ["acme-roles", "acme/roles.py", "acme..roles"])
def test_a_name_that_is_no_module_name_is_refused_naming_the_variable(modules):
    with pytest.raises(ValueError, match="COORDINATION_ROLES_MODULES names"):
        Settings.from_env({"COORDINATION_ROLES_MODULES": modules})


def test_the_worker_stands_for_the_roles_its_roles_modules_declare(tmp_path):
    (tmp_path / "acme_roles.py").write_text(ROLES_MODULE)
    run = _import_app_main(tmp_path, "acme_roles")
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[('acme.billing-scheduler', ('invoices',))]"


def test_a_roles_module_that_cannot_be_imported_stops_the_worker_naming_it(tmp_path):
    run = _import_app_main(tmp_path, "acme_roles_missing")
    assert run.returncode != 0
    assert ("RolesModuleError: COORDINATION_ROLES_MODULES names 'acme_roles_missing', "
            "which cannot be imported") in run.stderr

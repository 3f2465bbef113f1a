"""The package order in pyproject.toml ([tool.importlinter]) holds, and the check bites: an
upward import, even one inside a function, or an import circle between the modules of a package
breaks it, naming the import."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT

LINT_IMPORTS = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the package and its contracts, to add imports to."""
    shutil.copytree(REPO_ROOT / "loongsage", tmp_path / "loongsage", ignore=shutil.ignore_patterns("__pycache__", "data"))
    shutil.copy(REPO_ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def lint_imports(tree: Path) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [LINT_IMPORTS, "--no-cache", "--no-logo"], cwd=tree, env=environment, capture_output=True, text=True, timeout=120
    )


def append(path: Path, code: str) -> None:
    path.write_text(path.read_text() + "\n\n" + code + "\n")


def test_the_package_order_holds(tree):
    result = lint_imports(tree)
    assert result.returncode == 0, result.stdout


def test_an_upward_import_inside_a_function_breaks_it(tree):
    append(tree / "loongsage/config/schema.py", "def _later():\n    from loongsage.controller import loop\n\n    return loop")
    result = lint_imports(tree)
    assert result.returncode == 1
    assert "loongsage.config is not allowed to import loongsage.controller" in result.stdout
    assert "loongsage.config.schema -> loongsage.controller.loop" in result.stdout


def test_an_import_circle_inside_a_package_breaks_it(tree):
    append(tree / "loongsage/transfer/routes.py", "from loongsage.transfer import planner  # noqa")
    result = lint_imports(tree)
    assert result.returncode == 1
    assert "No cycles are allowed in loongsage.transfer" in result.stdout

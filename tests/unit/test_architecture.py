"""The layer contract in pyproject.toml is live: a forbidden import makes `lint-imports` fail."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    return subprocess.run([LINT_IMPORTS, str(tree / "pyproject.toml")], cwd=tree,
                          env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("layers")
    shutil.copytree(ROOT / "src", copy / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    return copy


def _with_import(tree: Path, module: str, line: str) -> None:
    path = tree / "src" / Path(*module.split(".")).with_suffix(".py")
    path.write_text(path.read_text() + f"\n{line}\n")


def test_the_tree_keeps_its_contracts(tree: Path) -> None:
    result = _lint(tree)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(("module", "line", "expected"), [
    ("tether.federation.health", "import tether.local.api  # noqa", "tether.federation is not allowed to import tether.local"),
    ("tether.kube.errors", "import tether.federation.model  # noqa", "tether.kube is not allowed to import tether.federation"),
    ("tether.objects.selectors", "import tether.kube.errors  # noqa", "tether.objects is not allowed to import tether.kube"),
])
def test_a_forbidden_import_breaks_the_layers(tree: Path, module: str, line: str, expected: str,
                                              tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(tree, broken)
    _with_import(broken, module, line)
    result = _lint(broken)
    assert result.returncode != 0
    assert expected in result.stdout


def test_an_import_cycle_breaks_the_acyclic_contract(tree: Path, tmp_path: Path) -> None:
    broken = tmp_path / "cycle"
    shutil.copytree(tree, broken)
    _with_import(broken, "tether.objects.jsonpath", "import tether.objects.selectors  # noqa")
    _with_import(broken, "tether.objects.selectors", "import tether.objects.jsonpath  # noqa")
    result = _lint(broken)
    assert result.returncode != 0
    assert "cycles" in result.stdout.lower()

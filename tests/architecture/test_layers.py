"""The layers of docs/architecture.md hold: import-linter's contracts (pyproject.toml) are kept,
and an upward import would break them.

``specplan/`` holds a link to each layer's folder (``specplan/core -> ../core``, ...), so that
``lint-imports``, run in the repository root, sees the package as it is installed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
LAYERS = ("core", "planner", "models", "quant", "runtime", "profiler", "bench", "distill", "serve", "cli")


def _lint(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=root, capture_output=True, text=True, timeout=300)


def test_every_import_points_down():
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "2 kept, 0 broken" in result.stdout


def test_every_layer_is_linked_into_the_package():
    for layer in LAYERS:
        link = ROOT / "specplan" / layer
        assert link.is_symlink() and link.resolve() == (ROOT / layer).resolve(), layer


@pytest.mark.parametrize("module, line", [
    ("planner/latency.py", "import specplan.runtime.session  # upward: planner -> runtime\n"),
    ("core/plan.py", "import torch  # the core types must stay torch-free\n"),
])
def test_an_upward_import_breaks_a_contract(tmp_path, module, line):
    """The check can fail: a copy of the project with one upward import is refused."""
    copy = tmp_path / "project"
    for folder in ("specplan", *LAYERS):
        shutil.copytree(ROOT / folder, copy / folder, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "data"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    target = copy / module
    target.write_text(line + target.read_text(encoding="utf-8"), encoding="utf-8")
    result = _lint(copy)
    assert result.returncode != 0
    assert "BROKEN" in result.stdout

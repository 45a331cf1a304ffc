"""The layers of docs/architecture.md hold: import-linter's contracts (pyproject.toml) are kept,
and an upward import would break them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _check(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(root / "scripts" / "check_layers.py")], capture_output=True, text=True,
                          timeout=300)


def test_every_import_points_down():
    result = _check(ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "2 kept, 0 broken" in result.stdout


@pytest.mark.parametrize("module, line", [
    ("planner/latency.py", "import specplan.runtime.session  # upward: planner -> runtime\n"),
    ("core/plan.py", "import torch  # the core types must stay torch-free\n"),
])
def test_an_upward_import_breaks_a_contract(tmp_path, module, line):
    """The check can fail: a copy of the project with one upward import is refused."""
    copy = tmp_path / "project"
    for folder in ("specplan", "core", "planner", "models", "quant", "runtime", "profiler", "bench", "distill", "cli",
                   "scripts"):
        shutil.copytree(ROOT / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__", "data"))
    (copy / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text(encoding="utf-8"), encoding="utf-8")
    target = copy / module
    target.write_text(line + target.read_text(encoding="utf-8"), encoding="utf-8")
    result = _check(copy)
    assert result.returncode != 0
    assert "BROKEN" in result.stdout

"""Quiet start: a command's stderr holds the program's own lines only (library chatter needs --verbose)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPECPLAN = Path(sys.executable).with_name("specplan")


def _specplan(*arguments: str, cwd: Path, environment: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(SPECPLAN), *arguments], cwd=cwd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(environment or {})})


def test_plan_help_and_plan_print_nothing_on_stderr(tmp_path):
    shutil.copy(ROOT / "profiles" / "cpu" / "profile.yaml", tmp_path / "profile.yaml")
    help_text = _specplan("plan", "--help", cwd=tmp_path)
    assert help_text.returncode == 0 and help_text.stderr == "" and "--sku" in help_text.stdout
    plan = _specplan("plan", "profile.yaml", cwd=tmp_path)
    assert plan.returncode == 0 and plan.stderr == ""


@pytest.mark.realmodel
def test_run_on_the_default_model_prints_only_its_own_lines(tmp_path):
    """torch, torchao and transformers stay silent (before quieting, torch's pytree registry printed
    two ``W... _pytree.py`` lines as transformers imported torchao)."""
    shutil.copy(ROOT / "profiles" / "cpu" / "profile.yaml", tmp_path / "profile.yaml")
    assert _specplan("plan", "profile.yaml", cwd=tmp_path).returncode == 0
    fresh = {"SPECPLAN_CACHE": str(tmp_path / "cache")}  # a new user's first run: the GGUF converts first
    run = _specplan("run", "plan.yaml", "--force", "--max-new-tokens", "4", "--prompt", "Hi", cwd=tmp_path,
                    environment=fresh)
    assert run.returncode == 0, run.stderr
    foreign = [line for line in run.stderr.splitlines() if line and not line.startswith("specplan:")]
    assert foreign == [], foreign
    assert "[specplan] " in run.stdout

"""Importing GPTQModel (quant/backends.py) prints no banner and no INFO lines unless --verbose;
its errors still show."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow,  # importing GPTQModel takes about a minute here
              pytest.mark.skipif(importlib.util.find_spec("gptqmodel") is None, reason="needs the gptq extra")]

IMPORT = """
import logging, sys
from specplan.core import quiet
mode = sys.argv[1]
if mode == "api":
    quiet.quiet_import_noise()
else:
    quiet.quiet_libraries(verbose=mode == "verbose")
from specplan.quant.backends import require_backend
from specplan.quant.methods import GPTQ
require_backend(GPTQ)
from logbar import LogBar
print("LEVEL", logging.getLogger("logbar").level)
LogBar.shared().error("a real error")
"""


def _import(mode: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", IMPORT, mode], capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("mode, level", [("quiet", 40), ("api", 20)])
def test_the_gptq_backend_imports_without_a_banner(mode, level):
    """``quiet``: what every command does (errors only from then on); ``api``: import chatter only,
    GPTQModel's INFO level back afterwards."""
    result = _import(mode)
    assert result.returncode == 0, result.stderr
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert lines[0] == f"LEVEL {level}", lines  # nothing printed before: no logo, no versions, no INFO
    assert "a real error" in lines[1] and len(lines) == 2, lines


def test_verbose_shows_the_banner():
    """The check above sees the banner where it is printed (with --verbose)."""
    result = _import("verbose")
    assert result.returncode == 0, result.stderr
    assert "GPT-QModel" in result.stdout and "LEVEL 20" in result.stdout

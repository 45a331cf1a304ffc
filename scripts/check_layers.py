"""Check the import-linter contracts of pyproject.toml (docs/architecture.md, "Layers").

The top-level folders install as ``specplan.<folder>`` through setuptools ``package-dir``, which
import-linter cannot follow in a checkout (it walks the ``specplan/`` folder only). So this
script lays the package out as it is installed, in a temporary folder, and runs
``lint-imports`` there with the project's own configuration. Exit code: lint-imports' own
(0 when every contract is kept).

    .venv/bin/python scripts/check_layers.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def assemble(destination: Path) -> None:
    """Copy every package folder of pyproject's package-dir to where it installs under ``destination``."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    mapping = config["tool"]["setuptools"]["package-dir"]
    for package in sorted(mapping, key=len):  # parents first
        target = destination.joinpath(*package.split("."))
        shutil.copytree(ROOT / mapping[package], target, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "data", "*.pyc"))
    shutil.copy(ROOT / "pyproject.toml", destination / "pyproject.toml")


def main() -> int:
    lint = Path(sys.executable).with_name("lint-imports")
    if not lint.is_file():
        sys.stderr.write("check_layers: lint-imports is not installed; run bash scripts/setup.sh (extra `dev`)\n")
        return 2
    with tempfile.TemporaryDirectory(prefix="specplan-layers-") as folder:
        assemble(Path(folder))
        environment = {**os.environ, "PYTHONPATH": folder}
        return subprocess.run([str(lint), "--no-cache", "--config", "pyproject.toml"], cwd=folder,
                              env=environment).returncode


if __name__ == "__main__":
    raise SystemExit(main())

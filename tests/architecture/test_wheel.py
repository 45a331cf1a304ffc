"""A wheel works outside the checkout: built from pyproject, installed into a fresh virtual
environment, it plans for every SKU of its packaged table and finds its packaged prompts."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv holding only the built wheel; the dependencies come from the test's own
    environment through a .pth line (so nothing is downloaded), never the checkout."""
    folder = tmp_path_factory.mktemp("wheel")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(folder / "dist"), str(ROOT)],
                           capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-2000:]
    wheel = next((folder / "dist").glob("specplan-*.whl"))
    environment = folder / "venv"
    venv.EnvBuilder(with_pip=False).create(environment)
    site = Path(subprocess.run([str(environment / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(environment / "bin" / "python"), "install",
                              "--no-deps", "-q", str(wheel)], capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr[-2000:]
    return environment


def _run(environment: Path, *arguments: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(environment / "bin" / "specplan"), *arguments], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={"PATH": "/usr/bin:/bin", "HOME": str(cwd)})


def test_the_installed_wheel_is_not_the_checkout(installed, tmp_path):
    where = subprocess.run([str(installed / "bin" / "python"), "-c", "import specplan.core, specplan.cli; "
                            "print(specplan.core.__file__)"], cwd=tmp_path, capture_output=True, text=True)
    assert where.returncode == 0, where.stderr
    assert str(installed) in where.stdout and str(ROOT) not in where.stdout


def test_plan_for_every_sku_from_the_installed_wheel(installed, tmp_path):
    shutil.copy(ROOT / "profiles" / "cpu" / "profile.yaml", tmp_path / "profile.yaml")
    result = _run(installed, "plan", "profile.yaml", "--sku", "all", "-o", "sku-plans", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "sku-plans" / "summary.md").is_file()
    assert len(list((tmp_path / "sku-plans").glob("*/plan.yaml"))) >= 3
    assert result.stderr == ""


def test_profile_help_and_packaged_prompts(installed, tmp_path):
    help_text = _run(installed, "profile", "--help", cwd=tmp_path)
    assert help_text.returncode == 0 and "--drafter" in help_text.stdout
    prompts = subprocess.run([str(installed / "bin" / "python"), "-c",
                              "from specplan.core.prompts import spec_bench_split; print(len(spec_bench_split('evaluation')))"],
                             cwd=tmp_path, capture_output=True, text=True, env={"HOME": str(tmp_path)})
    assert prompts.returncode == 0, prompts.stderr
    assert int(prompts.stdout) > 0

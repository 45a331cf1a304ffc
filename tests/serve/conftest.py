"""A llama.cpp plan for the default GGUF with exact numerics (so that a speculative round's output is
bit-identical to plain decoding), and ``specplan serve`` started on it on 127.0.0.1 in a subprocess."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from specplan.api import solve_plan_file
from specplan.core.plan import save_plan
from specplan.core.profile import load_profile, save_profile
from specplan.planner.options import runtime_options

STORED = Path(__file__).resolve().parents[2] / "profiles" / "cpu-smollm2-llamacpp-edit-quick" / "profile.yaml"
START = re.compile(r"at (http://\S+/v1);")


@pytest.fixture(scope="session")
def exact_plan(tmp_path_factory) -> Path:
    """The stored default-model llama.cpp profile with exact numerics, solved for one stage (a lookup chain)."""
    pytest.importorskip("llama_cpp")
    folder = tmp_path_factory.mktemp("serve-plan")
    profile = load_profile(STORED)
    profile_path, plan_path = folder / "profile.yaml", folder / "plan.yaml"
    save_profile(replace(profile, device=replace(profile.device, numerics="exact")), profile_path)
    solution = solve_plan_file(load_profile(profile_path), profile_path, plan_path, runtime_options(), stages=1)
    save_plan(solution.plan, plan_path)
    return plan_path


class Served:
    """A running ``specplan serve``: its base URL and process."""

    def __init__(self, plan: Path, *flags: str):
        command = [sys.executable, "-m", "specplan.cli.main", "serve", str(plan), "--port", "0", "--threads", "2", *flags]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                        env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.line = self.process.stdout.readline()
        match = START.search(self.line)
        if match is None:
            self.process.kill()
            raise RuntimeError(f"specplan serve did not start: {self.line!r} {self.process.stderr.read()[-2000:]}")
        self.base_url = match.group(1)
        self.root = self.base_url.removesuffix("/v1")

    def stop(self, timeout: float = 60.0) -> tuple[int, str]:
        """SIGTERM, then the exit code and stderr."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        return self.process.returncode, self.process.stderr.read()


@pytest.fixture(scope="module")
def server(exact_plan):
    served = Served(exact_plan, "--queue", "3")
    yield served
    served.stop()


def wait_until(check, seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False

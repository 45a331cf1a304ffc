"""measurements/precision_plans.py: each target precision of a quant-aware profile solved as the target."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "measurements"))

from precision_plans import precisions  # noqa: E402

from specplan.core.profile import load_profile  # noqa: E402


def test_each_variant_becomes_the_only_target_with_its_own_curve():
    profile = load_profile(ROOT / "profiles/cpu-qwen-gptq/profile.yaml")
    rows = precisions(profile)
    assert [label.split()[0] for label, _ in rows] == ["gptq-w4g128", "nf4", "none"]
    variants = {model.quant: model for model in profile.models if model.role in ("target", "variant")}
    for label, solved in rows:
        assert [model.id for model in solved.models if model.role in ("target", "variant")] == ["target"]
        assert solved.target.latency == variants[label.split()[0]].latency
        assert solved.acceptance == profile.acceptance


def test_the_table_names_a_different_plan_where_the_curves_differ():
    out = subprocess.run([sys.executable, str(ROOT / "measurements/precision_plans.py"),
                          str(ROOT / "profiles/cpu-qwen-gptq/profile.yaml")], capture_output=True, text=True, check=True)
    plans = [line.split(" | ")[-2] for line in out.stdout.splitlines()[2:]]
    assert len(plans) == 3 and len(set(plans)) == 3, out.stdout

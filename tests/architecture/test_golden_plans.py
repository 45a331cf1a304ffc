"""No behaviour change: ``specplan plan`` on the stored profiles writes the plans it wrote before
the layering refactor (tests/golden_plans/, written by the code of commit fe02bb4).

Each case (tests/golden_plans/<case>/) carries its own copy of the profile it solves
(``profile.yaml``, byte for byte the profiles/<case>/profile.yaml the plans were written from; the
plans record its sha256). Re-measuring a stored profile under profiles/ therefore leaves these
tests alone: they pin the planner, not the measurements.

Only the solver's wall time (``solver.seconds``) may differ; everything else byte for byte.
The ``h100`` plans and their roofline profiles were rewritten once, when SKU plans gained the
batch-size schedule: the rewrite only added the schedule and the batched curves
(and so changed the roofline profile's sha256); every line of the batch-1 plan stayed as it was.
They were rewritten a second time when the CUDA SKUs' overheads (30 us per layer, 40 us per
sequence) and dequantisation tile (64 rows) were held against published GPU results
(`specplan predict`, docs/planner-math.md section 13): a forward that costs more relative to its
bandwidth floor pays for wider trees, so the H100 plans for SmolLM2 grew from 9-15 to 24-64 nodes.
Every plan was rewritten a third time when the solver began recording its floor (``solver.floor``,
docs/planner-math.md section 9.1): loaded as YAML, each new plan less that key equals the old one.
Plans now end with the copy of their profile that runs them without the profile file
(``carried_profile``, core/contract.py); it is compared apart, with the profile it copies.
The torch plans were rewritten a fourth time when `plan` began costing chains over the calibration's
answer length by default (``solver.horizon``, planner/horizon.py ``calibration_horizon``): every chosen
shape stayed as it was; the sequence alternatives' costs moved by under 0.3%.
The ``h100`` plans were rewritten a fifth time when a schedule row above batch 1 began asking speculation
for a margin over plain decoding (docs/planner-math.md section 11.5, "Sharing a forward"): rows predicted
1.003-1.029x became plain decoding (with the reason in their summary) and the crossover batches fell; every
line of the batch-1 plan stayed as it was.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from specplan.cli.main import main
from specplan.core.plan import load_plan
from specplan.core.profile import carried_part, load_profile, profile_to_dict

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden_plans"
SECONDS = re.compile(r"seconds: [0-9.e+-]+")

CASES = [(profile, name) for profile in sorted(p.name for p in GOLDEN.iterdir())
         for name in ("plan", "stages2", "h100") if (GOLDEN / profile / f"{name}.yaml").is_file()]
ARGUMENTS = {"plan": [], "stages2": ["--stages", "2"], "h100": ["--sku", "h100-sxm"]}


def _normalised(path: Path) -> str:
    text = path.read_text(encoding="utf-8").split("\ncarried_profile:")[0].rstrip("\n") + "\n"
    return SECONDS.sub("seconds: <wall time>", text)


@pytest.mark.parametrize("profile, name", CASES)
def test_plan_matches_the_plan_written_before_the_refactor(profile, name, tmp_path, monkeypatch, capsys):
    shutil.copy(GOLDEN / profile / "profile.yaml", tmp_path / "profile.yaml")
    monkeypatch.chdir(tmp_path)
    assert main(["plan", "profile.yaml", "-o", f"{name}.yaml", *ARGUMENTS[name]]) == 0
    assert _normalised(tmp_path / f"{name}.yaml") == _normalised(GOLDEN / profile / f"{name}.yaml")
    carried = load_plan(tmp_path / f"{name}.yaml").carried_profile
    if name != "h100":  # a SKU's plan runs on a roofline profile of another device: nothing to carry
        assert carried == profile_to_dict(carried_part(load_profile(tmp_path / "profile.yaml")))
    if name == "h100":
        assert _normalised(tmp_path / "roofline-profile.yaml") == _normalised(GOLDEN / profile / "roofline-profile.yaml")


def test_a_changed_plan_would_fail(tmp_path):
    """The comparison can fail: a plan with another tree is not the golden one."""
    golden = GOLDEN / "cpu" / "plan.yaml"
    changed = tmp_path / "plan.yaml"
    changed.write_text(golden.read_text(encoding="utf-8").replace("budget: 2", "budget: 3"), encoding="utf-8")
    assert _normalised(changed) != _normalised(golden)

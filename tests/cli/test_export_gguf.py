"""``specplan export --engine llama.cpp`` with a distilled model drafter (a save_pretrained folder):
the GGUF is written and the printed llama-server command loads it with ``--spec-draft-model``
(a flag of the recorded llama.cpp interface)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from specplan.cli.main import main
from specplan.core.plan import save_plan
from specplan.core.profile import AcceptanceEntry, DeviceInfo, ModelEntry, Profile, save_profile
from specplan.core.yamlio import file_sha256
from specplan.planner import PlanOptions, solve_plan

from tests.engine_records import unknown_names
from tests.planner.export.test_real import flat

pytestmark = pytest.mark.filterwarnings("ignore::specplan.planner.PlannerWarning")


def plan_with_drafter(folder: str, tmp_path: Path) -> Path:
    models = (ModelEntry("target", "default", "fp", dtype="float32", role="target", latency=(flat(40.0),)),
              ModelEntry("model-tiny", f"model:{folder}", "fp", dtype="float32", latency=(flat(2.0),)))
    acceptance = (AcceptanceEntry("model-tiny", "target", 0.0, 0.7, 8, rank_accept=(0.7,)),)
    profile = Profile(DeviceInfo("cpu", "test cpu", "cpu"), models, acceptance)
    save_profile(profile, tmp_path / "profile.yaml")
    result = solve_plan(profile, PlanOptions(), profile_path="profile.yaml",
                        profile_sha256=file_sha256(tmp_path / "profile.yaml"))
    save_plan(result.plan, tmp_path / "plan.yaml")
    return tmp_path / "plan.yaml"


def test_export_writes_the_drafter_as_gguf_and_names_it(tiny_model_dir, tmp_path, capsys):
    import gguf

    plan = plan_with_drafter(tiny_model_dir, tmp_path)
    assert main(["export", str(plan), "--engine", "llama.cpp", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    written = tmp_path / "export-llama.cpp" / (Path(tiny_model_dir).name + ".gguf")
    assert record["written"] == [str(written)] and not record["not_writable_yet"]
    words = [word for word in shlex.split(record["config"]) if word != "--no-repack"]  # written on a CPU with AMX
    flags = dict(zip(words[1::2], words[2::2]))
    assert flags["--spec-draft-model"] == str(written) and flags["--spec-type"] == "draft-simple"
    assert not unknown_names("llama.cpp", record["config"])
    reader = gguf.GGUFReader(str(written))
    assert str(reader.fields["tokenizer.ggml.pre"].contents()) == "smollm"  # the target GGUF's pre-tokenizer
    assert int(reader.fields["llama.block_count"].contents()) == 4


def test_export_to_a_chosen_folder_and_vllm_writes_nothing(tiny_model_dir, tmp_path, capsys):
    plan = plan_with_drafter(tiny_model_dir, tmp_path)
    assert main(["export", str(plan), "--engine", "llama.cpp", "-o", str(tmp_path / "out")]) == 0
    assert "--spec-draft-model " + str(tmp_path / "out") in capsys.readouterr().out
    assert main(["export", str(plan), "--engine", "vllm"]) == 0
    assert not (tmp_path / "export-vllm").exists()


def test_a_folder_that_is_no_model_stays_unwritable(tmp_path, capsys):
    (tmp_path / "notes").mkdir()
    plan = plan_with_drafter(str(tmp_path / "notes"), tmp_path)
    assert main(["export", str(plan), "--engine", "llama.cpp", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["written"] == [] and "GGUF" in record["not_writable_yet"][0]


@pytest.mark.parametrize("crashes", [True, False])
def test_the_command_runs_without_repacking_where_repacking_crashes(tmp_path, capsys, monkeypatch, crashes):
    """On a CPU with AMX llama-server dies repacking the weights: the command says ``--no-repack``, and why."""
    import specplan.cli.export as export

    monkeypatch.setattr(export, "_repacking_crashes", lambda: crashes)
    (tmp_path / "notes").mkdir()
    plan = plan_with_drafter(str(tmp_path / "notes"), tmp_path)
    assert main(["export", str(plan), "--engine", "llama.cpp"]) == 0
    out, err = capsys.readouterr()
    assert out.strip().startswith("llama-server ") and out.strip().endswith(" --no-repack") == crashes
    assert ("repacking crashes on this CPU's AMX" in err) == crashes
    assert main(["export", str(plan), "--engine", "vllm"]) == 0
    assert "--no-repack" not in capsys.readouterr().out

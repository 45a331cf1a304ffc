"""``specplan bench PLAN --engine transformers``: the setting ``export --engine transformers``
prints runs through transformers' ``generate`` beside plain greedy ``generate`` on the same
prompts; its outputs equal greedy decoding's (float32, a tiny random Llama), and the report
carries the export's prediction beside what was measured."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch

from specplan.cli.main import main
from specplan.core.plan import save_plan
from specplan.core.profile import AcceptanceEntry, DeviceInfo, ModelEntry, Profile, RetrievalEntry, save_profile
from specplan.core.yamlio import file_sha256
from specplan.planner import PlanOptions, solve_plan

from tests.planner.export.test_real import flat

pytestmark = pytest.mark.filterwarnings("ignore::specplan.planner.PlannerWarning")
DRAFTERS = {"ngram-3": "ngram:3", "layerskip-2": "layerskip:2", "model-tiny": "model:{folder}"}


def plan_for(folder: str, tmp_path, drafter: str):
    """A float32 plan of the tiny target where ``drafter`` pays off (made-up latencies and acceptance)."""
    source = DRAFTERS[drafter].format(folder=folder)
    models = [ModelEntry("target", folder, "fp", dtype="float32", role="target", latency=(flat(40.0),))]
    retrieval = (RetrievalEntry(drafter, source, 0.02),) if source.startswith("ngram:") else ()
    if not retrieval:
        models.append(ModelEntry(drafter, source, "fp", dtype="float32", latency=(flat(4.0),),
                                 base="target" if source.startswith("layerskip:") else None))
    acceptance = (AcceptanceEntry(drafter, "target", 0.0, 0.7, 8, rank_accept=(0.7,)),)
    profile = Profile(DeviceInfo("cpu", "test cpu", "cpu"), tuple(models), acceptance, retrieval)
    save_profile(profile, tmp_path / "profile.yaml")
    result = solve_plan(profile, PlanOptions(), profile_path="profile.yaml",
                        profile_sha256=file_sha256(tmp_path / "profile.yaml"))
    save_plan(result.plan, tmp_path / "plan.yaml")
    return tmp_path / "plan.yaml"


def bench_json(plan, capsys) -> dict:
    assert main(["bench", str(plan), "--engine", "transformers", "--limit", "2", "--max-new-tokens", "12", "--json",
                 "--threads", "1"]) == 0
    return json.loads(capsys.readouterr().out)


@torch.inference_mode()
def reference_greedy(folder: str, prompt_ids: list[int], tokens: int, eos: set[int]) -> tuple[int, ...]:
    """Greedy decoding the slow way: a full forward over the whole sequence for every token."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    ids = list(prompt_ids)
    for _ in range(tokens):
        ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
        if ids[-1] in eos:
            break
    return tuple(ids[len(prompt_ids):])


@pytest.mark.parametrize("drafter", sorted(DRAFTERS))
def test_the_exported_setting_runs_and_reports_predicted_beside_measured(drafter, tiny_model_dir, tmp_path, capsys):
    record = bench_json(plan_for(tiny_model_dir, tmp_path, drafter), capsys)
    assert record["engine"] == "transformers" and "model.generate(" in record["config"]
    assert [method["name"] for method in record["methods"]] == ["transformers", "exported"]
    for key in ("predicted_ms_per_token", "predicted_tokens_per_s", "measured_ms_per_token", "measured_tokens_per_s",
                "measured_plain_tokens_per_s", "measured_speedup", "predicted_over_measured"):
        assert math.isfinite(record[key]) and record[key] > 0, key
    assert record["predicted_over_measured"] == pytest.approx(record["predicted_tokens_per_s"]
                                                              / record["measured_tokens_per_s"])
    assert record["predicted_tokens_per_s"] == pytest.approx(1e3 / record["predicted_ms_per_token"])
    assert record["same_output_share"] == 1.0 and record["lossless"].startswith("2/2 identical")
    settings = record["methods"][1]["settings"]
    gamma = int(re.search(r"num_assistant_tokens = (\d+)|prompt_lookup_num_tokens=(\d+)", record["config"])
                .group(1 if drafter != "ngram-3" else 2))
    assert settings.get("prompt_lookup_num_tokens", settings.get("num_assistant_tokens")) == gamma
    assert ("assistant_early_exit=2" in record["config"]) == ("assistant_early_exit" in settings)


def test_outputs_equal_greedy_decoding_computed_the_slow_way(tiny_model_dir):
    from specplan.bench.engine_rows import run_engine_bench
    from specplan.bench.engine_transformers import transformers_methods
    from specplan.core.plan import Stage, StageShape
    from specplan.models.load import load_model
    from specplan.runtime.build import eos_ids

    target = load_model(tiny_model_dir)
    eos = eos_ids(target)
    prompts = [[1, 504, 3158, 282, 260, 3714, 504, 3158], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]]
    stage = Stage("ngram-2", "target", StageShape("sequence", gamma=3))
    rows = run_engine_bench(transformers_methods(stage, "ngram:2", target, torch.device("cpu"), eos), prompts, 16)
    for index, prompt_ids in enumerate(prompts):
        expected = reference_greedy(tiny_model_dir, prompt_ids, 16, eos)
        assert rows[0].outputs[index] == expected and rows[1].outputs[index] == expected
    assert rows[1].new_tokens == sum(len(output) - 1 for output in rows[1].outputs)


@pytest.mark.parametrize("arguments, words", [
    (["--threads", "0"], "--threads"),
    (["--max-new-tokens", "5000"], "over the model's context"),
    (["--prompts", "missing.jsonl"], "missing.jsonl"),
])
def test_bad_input_is_one_line_and_exit_2(arguments, words, tiny_model_dir, tmp_path, capsys, monkeypatch):
    plan = plan_for(tiny_model_dir, tmp_path, "ngram-3")
    monkeypatch.chdir(tmp_path)
    try:
        code = main(["bench", str(plan), "--engine", "transformers", "--limit", "1", *arguments])
    except SystemExit as exit_:  # a usage error (--threads 0): argparse exits, as in a shell
        code = exit_.code
    assert code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and words in lines[0]

"""``specplan bench PLAN --engine llama.cpp``: the exported llama.cpp setting runs in
llama-cpp-python beside plain llama.cpp on the same prompts, with the export's prediction; a
model drafter drafts through its GGUF (GreedyDraft)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from specplan.cli.main import main

from tests.cli.test_export_gguf import plan_with_drafter

pytestmark = [pytest.mark.realmodel, pytest.mark.filterwarnings("ignore::specplan.planner.PlannerWarning")]
STORED = Path(__file__).resolve().parents[2] / "profiles" / "cpu"


def bench_json(plan, capsys, limit: int = 1) -> dict:
    assert main(["bench", str(plan), "--engine", "llama.cpp", "--limit", str(limit), "--max-new-tokens", "8", "--json",
                 "--threads", "1"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_stored_plan_runs_exported_and_plain(tmp_path, capsys):
    pytest.importorskip("llama_cpp")
    for name in ("profile.yaml", "plan.yaml"):
        shutil.copy(STORED / name, tmp_path / name)
    record = bench_json(tmp_path / "plan.yaml", capsys, limit=10)  # one prompt of 769 tokens: past n_batch 512
    assert record["config"].startswith("llama-server -m ") and "--spec-type ngram-simple" in record["config"]
    assert [method["name"] for method in record["methods"]] == ["llama.cpp", "exported"]
    assert "prompt lookup" in record["methods"][1]["description"]
    for key in ("measured_ms_per_token", "measured_plain_ms_per_token", "predicted_ms_per_token", "measured_speedup"):
        assert math.isfinite(record[key]) and record[key] > 0
    assert all(method["new_tokens"] == 70 for method in record["methods"])  # 10 x (8 minus the first: prefill)
    assert 0.0 <= record["same_output_share"] <= 1.0


def test_a_model_drafter_drafts_from_its_gguf(tiny_model_dir, tmp_path, capsys):
    pytest.importorskip("llama_cpp")
    record = bench_json(plan_with_drafter(tiny_model_dir, tmp_path), capsys)
    assert "--spec-draft-model" in record["config"]
    assert "draft model" in record["methods"][1]["description"]
    assert (tmp_path / "export-llama.cpp" / (Path(tiny_model_dir).name + ".gguf")).is_file()


def test_greedy_draft_is_the_drafter_greedy_continuation(tiny_model_dir, tmp_path):
    llama_cpp = pytest.importorskip("llama_cpp")
    from specplan.bench.engine_llama_cpp import GreedyDraft
    from specplan.models.gguf_write import write_gguf

    path = write_gguf(tiny_model_dir, tmp_path / "d.gguf")
    reference = llama_cpp.Llama(model_path=str(path), n_ctx=128, n_threads=1, verbose=False)
    prompt = [1, 504, 3158, 282, 260, 3714]
    expected = []
    for token in reference.generate(prompt, temp=0.0, top_k=1, reset=True):
        expected.append(int(token))
        if len(expected) == 6:
            break
    draft = GreedyDraft(llama_cpp.Llama(model_path=str(path), n_ctx=128, n_threads=1, verbose=False), 3)
    assert draft(prompt).tolist() == expected[:3]
    assert draft(prompt + expected[:3]).tolist() == expected[3:6]  # the cache's shared prefix is kept
    assert draft(prompt + expected[:1]).tolist() == expected[1:4]  # and cut back after a rejection


def test_another_engine_is_a_one_line_error(capsys):
    with pytest.raises(SystemExit) as exit_:  # argparse refuses the choice
        main(["bench", str(STORED / "plan.yaml"), "--engine", "vllm"])
    assert exit_.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1

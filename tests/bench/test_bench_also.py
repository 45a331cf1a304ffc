"""``bench PLAN --also NAME=PLAN``: other plans of the same target in the same interleaved run (the
transfer matrix's one run per evaluation workload), refused in one line where they would compare
engines rather than plans."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specplan.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
SPEC_BENCH_PLAN = ROOT / "profiles" / "transfer-smollm2" / "plan-specbench" / "plan.yaml"  # llama.cpp, fast numerics
EDIT_PLAN = ROOT / "profiles" / "cpu-smollm2-llamacpp-edit-quick" / "plan.yaml"
TORCH_PLAN = ROOT / "profiles" / "cpu" / "plan.yaml"  # the same model on the torch backend


@pytest.mark.parametrize("also, fragment", [
    ("edit", "give NAME=PLAN"),
    ("=x.yaml", "give NAME=PLAN"),
    ("a b=x.yaml", "give NAME=PLAN"),
    (f"torch={TORCH_PLAN}", "compare plans of one backend"),
])
def test_a_bad_also_is_one_line_and_exit_2(also, fragment, capsys):
    code = main(["bench", str(SPEC_BENCH_PLAN), "--also", also, "--no-plots"])
    err = capsys.readouterr().err
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1


def test_a_name_given_twice_is_refused(capsys):
    code = main(["bench", str(SPEC_BENCH_PLAN), "--also", f"edit={EDIT_PLAN}", "--also", f"edit={EDIT_PLAN}"])
    assert code == 2 and "new name" in capsys.readouterr().err


def test_also_goes_with_the_plans_own_runtime_only(capsys):
    code = main(["bench", str(SPEC_BENCH_PLAN), "--also", f"edit={EDIT_PLAN}", "--engine", "llama.cpp"])
    assert code == 2 and "drop it with --engine" in capsys.readouterr().err


@pytest.mark.realmodel
def test_other_plans_run_interleaved_and_lossless(tmp_path, capsys):
    pytest.importorskip("llama_cpp")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "Repeat exactly: the cat sat on the mat, the cat sat on the mat."}) + "\n")
    report = tmp_path / "report"
    assert main(["bench", str(SPEC_BENCH_PLAN), "--also", f"edit={EDIT_PLAN}", "--prompts", str(prompts),
                 "--limit", "1", "--max-new-tokens", "12", "--baselines", "plain-runtime,plan-fixed-chain", "--threads", "1",
                 "--no-plots", "--report", str(report)]) == 0
    data = json.loads((report / "report.json").read_text())
    rows = {row["method"]: row for row in data["rows"]}
    assert set(rows) == {"plan", "plan:edit", "plain-runtime"}
    # SmolLM2's T(n) / n is too flat for its chains to grow, so there is no fixed chain to compare
    assert any(note.startswith("plan-fixed-chain left out") for note in data["notes"])
    assert all(row["new_tokens"] > 0 and (row["identical"] or row["near_tie"]) for row in rows.values())
    edit_prediction = yaml_prediction(EDIT_PLAN)
    assert rows["plan:edit"]["predicted_tokens_per_s"] == pytest.approx(edit_prediction, rel=1e-3)
    assert "--also edit=" in data["meta"]["command"] and "--threads 1" in data["meta"]["command"]
    assert data["meta"]["threads"] == 1


def yaml_prediction(plan_path: Path) -> float:
    from specplan.core.plan import load_plan

    return load_plan(plan_path).predicted.tokens_per_s


def test_the_transfer_table_reads_each_plan_from_one_run(tmp_path):
    """measurements/transfer.py: the first plan is the bench's ``plan``, the others ``plan:NAME``; each
    cell is that method's pooled decode rate over the reference's."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("transfer", ROOT / "measurements" / "transfer.py")
    transfer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(transfer)
    rows = []
    for prompt, (plan, other, server) in enumerate([(2.0, 1.0, 1.0), (4.0, 1.0, 2.0)]):
        for method, seconds in (("plan", plan), ("plan:edit", other), ("llama-server", server)):
            tokens = 11 if method == "llama-server" else 10  # a peer's first token comes from its prefill
            rows.append({"method": method, "prompt_id": str(prompt), "new_tokens": tokens,
                         "decode_tokens_per_s": 10 / seconds, "predicted_tokens_per_s": 5.0})
    folder = tmp_path / "on-humaneval"
    folder.mkdir()
    (folder / "report.json").write_text(json.dumps({"rows": rows}))
    assert transfer.method_of("spec", "spec") == "plan" and transfer.method_of("edit", "spec") == "plan:edit"
    assert transfer.cell(folder, "plan").startswith("0.50x")  # 20 tokens in 6 s against 20 in 3 s
    assert transfer.cell(folder, "plan:edit").startswith("1.50x")  # 20 in 2 s
    assert "pred/meas 0.50" in transfer.cell(folder, "plan:edit")  # 5 tok/s predicted, 20 tokens in 2 s measured

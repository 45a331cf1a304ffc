"""``specplan run PLAN --batch B`` on a tiny random model with the real tokenizer: every prompt of
every batch identical to it decoded alone, batch records, one-line errors."""

from __future__ import annotations

import contextlib
import copy
import json
from pathlib import Path

import pytest
import yaml

from specplan.cli.main import main
from specplan.core.prompts import Prompt

PROMPTS = ["Hello there, hello there, hello", "def add(a, b): return a + b\ndef add(", "One two three one two",
           "Why?", "The cat sat on the mat. The cat sat on the"]
LLAMA_CPP_PLAN = Path(__file__).resolve().parents[2] / "profiles" / "transfer-smollm2" / "plan-specbench" / "plan.yaml"


@pytest.fixture(scope="module")
def ngram_plan(tmp_path_factory, tiny_model_dir):
    """A profiled tiny model whose plan is hand-set to ngram-3 -> target (sequence gamma 3)."""
    folder = tmp_path_factory.mktemp("batched")
    profile_path = folder / "profile.yaml"
    assert main(["profile", "--target", tiny_model_dir, "--drafter", "ngram:3", "--drafter", "recycle", "--quick", "--limit",
                 "2", "--dtype", "float32", "--device", "cpu", "-o", str(profile_path)]) == 0
    plan_path = folder / "plan.yaml"
    document = yaml.safe_load(plan_path.read_text())
    document["stages"] = [{"drafter": "ngram-3", "verifier": "target", "shape": {"kind": "sequence", "gamma": 3}}]
    document.pop("schedule", None)
    plan_path.write_text(yaml.safe_dump(document, sort_keys=False))
    prompts_path = folder / "prompts.jsonl"
    prompts_path.write_text("".join(json.dumps({"prompt": text}) + "\n" for text in PROMPTS))
    return plan_path, prompts_path


def test_profile_context_sets_where_the_curves_are_measured(tmp_path, tiny_model_dir):
    from specplan.core.profile import load_profile

    path = tmp_path / "profile.yaml"
    assert main(["profile", "--target", tiny_model_dir, "--drafter", "ngram:3", "--quick", "--limit", "1",
                 "--dtype", "float32", "--device", "cpu", "--context", "48", "--batch-sizes", "1,2", "--no-plan",
                 "-o", str(path)]) == 0
    curves = load_profile(path).target.latency
    assert {curve.batch for curve in curves} == {1, 2} and {curve.context for curve in curves} == {48}


def test_run_batch_is_identical_per_prompt(ngram_plan, capsys):
    plan_path, prompts_path = ngram_plan
    capsys.readouterr()
    assert main(["run", str(plan_path), "--prompts", str(prompts_path), "--batch", "3", "--max-new-tokens", "10",
                 "--json", "--compare-plain", "--force"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert len(records) == len(PROMPTS)
    assert [record["batch"] for record in records] == [3, 3, 3, 2, 2]
    assert all(record["identical_to_plain"] for record in records)
    assert all(0 < record["new_tokens"] == len(record["token_ids"]) <= 10 for record in records)
    assert records[0]["configuration"] == "ngram-3 -> target (sequence gamma 3)"
    assert any(record["mean_accepted"] > 1 for record in records)  # the n-gram drafts were accepted somewhere


def test_run_batch_prints_a_line_per_batch(ngram_plan, capsys):
    plan_path, prompts_path = ngram_plan
    capsys.readouterr()
    assert main(["run", str(plan_path), "--prompts", str(prompts_path), "--batch", "8", "--max-new-tokens", "6",
                 "--force"]) == 0
    out = capsys.readouterr().out
    assert out.count("[specplan] batch of 5:") == 1 and "tok/s for the batch" in out


@pytest.mark.parametrize("extra, fragment", [
    (["--batch", "0"], "--batch: 0 is out of range"),
    (["--batch", "2", "--stream"], "drop it with --batch"),
    (["--batch", "2", "--temperature", "0.7", "--compare-plain"], "pass --temperature 0 with it"),
    (["--batch", "2", "--top-p", "0"], "top-p"),
])
def test_bad_batch_flags_are_one_line_errors(ngram_plan, capsys, extra, fragment):
    plan_path, _ = ngram_plan
    capsys.readouterr()
    with pytest.raises(SystemExit) if extra[-2] in ("--batch", "--top-p") else contextlib.nullcontext():
        assert main(["run", str(plan_path), "--prompt", "Hi", "--force", *extra]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def with_stages(plan_path, stages: list[dict], name: str):
    """A copy of the fixture's plan with ``stages``, written beside it as ``name``."""
    document = yaml.safe_load(plan_path.read_text())
    document["stages"] = stages
    path = plan_path.parent / name
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def run_batched_records(path, prompts_path, capsys) -> list[dict]:
    """``run PATH --batch 5 --compare-plain --json`` over the fixture's prompts: one record per prompt."""
    capsys.readouterr()
    assert main(["run", str(path), "--prompts", str(prompts_path), "--batch", "5", "--max-new-tokens", "8",
                 "--json", "--compare-plain", "--force"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]


def test_a_tree_plan_and_a_hierarchy_run_batched(ngram_plan, capsys, tiny_model_dir):
    """Each prompt's engine is the plan's own, so every shape runs batched: a tree, and a hierarchy whose
    middle model (a layer-skip view of the target) decodes every prompt's drafts in one batched forward."""
    plan_path, prompts_path = ngram_plan
    tree = {"drafter": "ngram-3", "verifier": "target", "shape": {"kind": "tree", "parents": [-1, 0, 0, 1]}}
    records = run_batched_records(with_stages(plan_path, [tree], "tree.yaml"), prompts_path, capsys)
    assert all(record["identical_to_plain"] for record in records)
    assert records[0]["configuration"] == "ngram-3 -> target (tree 4 nodes depth 2)"
    folder = plan_path.parent / "hierarchy"
    assert main(["profile", "--target", tiny_model_dir, "--drafter", "ngram:3", "--drafter", "layerskip:1", "--quick",
                 "--limit", "1", "--dtype", "float32", "--device", "cpu", "-o", str(folder / "profile.yaml")]) == 0
    sequence = {"drafter": "ngram-3", "verifier": "layerskip-1", "shape": {"kind": "sequence", "gamma": 2}}
    top = {"drafter": "layerskip-1", "verifier": "target", "shape": {"kind": "sequence", "gamma": 3}}
    hierarchy_path = with_stages(folder / "plan.yaml", [sequence, top], "hierarchy.yaml")
    records = run_batched_records(hierarchy_path, prompts_path, capsys)
    assert all(record["identical_to_plain"] for record in records)
    assert records[0]["configuration"] == "ngram-3 -> layerskip-1 (sequence gamma 2); layerskip-1 -> target (sequence gamma 3)"


@pytest.mark.parametrize("stage, configuration", [
    ({"drafter": "recycle", "shape": {"kind": "sequence", "gamma": 3}}, "recycle -> target (sequence gamma 3)"),
    ({"drafter": "recycle", "shape": {"kind": "tree", "parents": [-1, 0]}}, "recycle -> target (tree 2 nodes depth 1)"),
    ({"drafter": "ngram-3", "shape": {"kind": "tree", "parents": [-1, 0, 1]}}, "ngram-3 -> target (tree 3 nodes depth 2)"),
])
def test_table_drafters_and_chain_trees_run_batched(ngram_plan, capsys, stage, configuration):
    """A recycling table learns from its own prompt's verifier rows in a batch; a chain tree runs as planned."""
    plan_path, prompts_path = ngram_plan
    path = with_stages(plan_path, [dict(stage, verifier="target")], "stage.yaml")
    records = run_batched_records(path, prompts_path, capsys)
    assert all(record["identical_to_plain"] for record in records)
    assert records[0]["configuration"] == configuration


def test_batched_bench_measures_every_method_at_every_batch(ngram_plan):
    from specplan.api import Runner
    from specplan.bench.batched import crossover, measure_batch, table

    plan_path, _ = ngram_plan
    runner = Runner.open(plan_path, force=True).plan_runner
    prompts = [runner.check_prompt(Prompt("p", "p", text), 6) for text in PROMPTS[:3]]
    points = [point for batch in (1, 2, 4) for point in measure_batch(runner, prompts, batch, 6, repeats=1)]
    assert {(p.batch, p.method) for p in points} == {(b, m) for b in (1, 2, 4)
                                                    for m in ("schedule", "plan", "plain-runtime", "plain")}
    assert all(p.tokens_per_s > 0 and p.new_tokens > 0 for p in points)
    # the decode alone (prefill apart) commits every token but each sequence's first, in less time
    assert all(p.decode_tokens_per_s > 0 for p in points)
    # float32: the speculative stage and transformers' padded generate commit plain decoding's tokens
    assert all(p.identical == p.batch for p in points)
    assert "| 4 | plain | transformers generate, left padding |" in table(points)
    assert crossover(points) in (None, 1, 2, 4)


@pytest.mark.parametrize("threshold", [0.0, 1e9])
def test_a_parting_output_is_named_a_near_tie_by_the_targets_gap(ngram_plan, monkeypatch, threshold):
    """A decoder whose first sequence parts at its third token: counted as not identical, and as a
    near-tie exactly when the target's top-2 gap there is below NEAR_TIE (set here to 0 and to 1e9)."""
    from specplan.api import Runner
    from specplan.bench import batched

    plan_path, _ = ngram_plan
    runner = Runner.open(plan_path, force=True).plan_runner
    prompts = [runner.check_prompt(Prompt("p", "p", text), 6) for text in PROMPTS[:2]]
    original = batched.engines_decoder

    def parting(runner, batch, stages, scheduled, stop_at_eos=True):
        configuration, decode = original(runner, batch, stages, scheduled, stop_at_eos)

        def run(chosen, max_new_tokens):
            outputs, seconds, rate = decode(chosen, max_new_tokens)
            if stages:  # the speculative stages: their first sequence parts at token 2
                first = list(outputs[0])
                first[2] = (first[2] + 1) % 100
                outputs = [tuple(first), *outputs[1:]]
            return outputs, seconds, rate
        return configuration, run

    monkeypatch.setattr(batched, "engines_decoder", parting)
    monkeypatch.setattr(batched, "NEAR_TIE", threshold)
    points = {p.method: p for p in batched.measure_batch(runner, prompts, 2, 6, repeats=1)}
    assert points["plain-runtime"].identical == 2 and points["plain-runtime"].near_ties == 0
    assert points["schedule"].identical == 1
    assert points["schedule"].near_ties == (1 if threshold > 1 else 0)
    assert ("(+1 near-tie)" in batched.table(list(points.values()))) == (threshold > 1)


def test_bench_batch_writes_the_table_and_the_crossover(ngram_plan, capsys, tmp_path):
    plan_path, prompts_path = ngram_plan
    capsys.readouterr()
    assert main(["bench", str(plan_path), "--batch", "2,1", "--prompts", str(prompts_path), "--limit", "2",
                 "--max-new-tokens", "4", "--report", str(tmp_path / "out"), "--force"]) == 0
    out = capsys.readouterr().out
    assert "| 2 | plain-runtime |" in out and "crossover batch" in out and "predicted n/a" in out
    document = json.loads((tmp_path / "out" / "batched.json").read_text())
    assert [(p["batch"], p["method"]) for p in document["points"]] == [
        (b, m) for b in (1, 2) for m in ("schedule", "plan", "plain-runtime", "plain")]
    assert all(p["identical"] == p["batch"] and p["tokens_per_s"] > 0 for p in document["points"])
    assert all(p["decode_tokens_per_s"] > 0 for p in document["points"])
    assert set(document["crossover_batch"]) == {"measured", "measured_decode_only", "predicted"}
    assert main(["bench", str(plan_path), "--batch", "0,2"]) == 2
    assert "--batch '0,2'" in capsys.readouterr().err
    assert main(["bench", str(plan_path), "--at-profile-context"]) == 2
    assert "goes with --batch" in capsys.readouterr().err


def test_bench_batch_at_the_profile_context(ngram_plan, capsys, tmp_path):
    """Every prompt exactly the profile's context long, so the decode runs where T(n, b) was measured."""
    from specplan.cli.bench_batched import at_profile_context
    from specplan.core.profile import load_profile

    plan_path, prompts_path = ngram_plan
    profile = load_profile(plan_path.parent / "profile.yaml")
    rows, context = at_profile_context([[1, 2, 3], [4, 5]], profile)
    assert context == profile.target.latency[0].context and [len(row) for row in rows] == [context] * 2
    assert rows[0][-3:] == [1, 2, 3] and rows[1][-2:] == [4, 5]  # each prompt ends its row
    capsys.readouterr()
    assert main(["bench", str(plan_path), "--batch", "2", "--prompts", str(prompts_path), "--limit", "2",
                 "--max-new-tokens", "4", "--at-profile-context", "--report", str(tmp_path / "out"), "--force"]) == 0
    document = json.loads((tmp_path / "out" / "batched.json").read_text())
    assert document["prompt_tokens"] == context
    # EOS does not stop a sequence there: every method commits the whole budget of every sequence
    assert all(point["new_tokens"] == 4 * point["batch"] for point in document["points"])


def test_the_schedule_row_for_the_batch_is_what_runs(ngram_plan, capsys):
    """Batch 2 runs the schedule's batch-1 row (the plan's n-gram), batch 4 and 5 its batch-4 row (plain
    decoding); the batch's line names the row for its size."""
    plan_path, prompts_path = ngram_plan
    document = yaml.safe_load(plan_path.read_text())
    predicted = {"ms_per_token": 1.0, "tokens_per_s": 1000.0, "plain_tokens_per_s": 900.0, "speedup": 1.1,
                 "accepted_per_target_forward": 1.5, "plan_tokens_per_s": 1000.0}
    document["schedule"] = {"schema_version": 1, "source": "measured", "crossover_batch": 4, "rows": [
        {"batch": 1, "summary": "ngram", "stages": copy.deepcopy(document["stages"]), "predicted": dict(predicted)},
        {"batch": 4, "summary": "plain", "stages": [], "predicted": dict(predicted, tokens_per_s=3600.0)}]}
    scheduled = plan_path.parent / "scheduled.yaml"
    scheduled.write_text(yaml.safe_dump(document, sort_keys=False))
    for batch, configuration, expected in (("2", "ngram-3 -> target (sequence gamma 3)", None),
                                           ("5", "plain decoding", None), ("4", "plain decoding", 3600.0)):
        capsys.readouterr()
        assert main(["run", str(scheduled), "--prompts", str(prompts_path), "--batch", batch, "--max-new-tokens", "4",
                     "--json", "--force"]) == 0
        record = json.loads(capsys.readouterr().out.strip().splitlines()[0])
        assert record["configuration"] == configuration
        assert record["predicted_batch_tokens_per_s"] == expected


def test_a_parting_output_is_a_near_tie_only_in_16_bit_and_below_the_gap():
    from specplan.cli.run_batched import _sequence_line

    record = {"prompt_id": "7", "new_tokens": 4, "mean_accepted": 1.0, "stop_reason": "eos",
              "identical_to_plain": False, "first_divergence": 2, "divergence_gap": 0.1}
    assert "bfloat16 near-tie" in _sequence_line(record, "bfloat16")
    assert "llama.cpp near-tie" in _sequence_line(record, "gguf")
    assert "lossless failure, please report it" in _sequence_line(record, "float32")
    assert "lossless failure" in _sequence_line(dict(record, divergence_gap=2.0), "bfloat16")
    assert _sequence_line(dict(record, identical_to_plain=True), "float32").endswith("alone: yes")


def test_the_api_decodes_batches_as_the_command_does(ngram_plan):
    """``Runner.open(plan, batch=B).generate_batches``: the batches ``run --batch`` prints, each greedy
    output the prompt's plain greedy one, and each sampled output the one the plan's engine samples for the
    prompt alone with the same seed (float32: a row decoded beside others is the row alone within 1e-4)."""
    from specplan.api import Runner
    from specplan.runtime.drafters.base import SamplingConfig

    plan_path, _ = ngram_plan
    runner = Runner.open(plan_path, force=True, batch=2)
    batches = list(runner.generate_batches(PROMPTS, max_new_tokens=6))
    assert [len(batch.prompts) for batch in batches] == [2, 2, 1]
    assert batches[0].configuration == "ngram-3 -> target (sequence gamma 3)"
    for batch in batches:
        for ids, sequence in zip(batch.prompt_ids, batch.result.sequences):
            alone = runner.plan_runner.generate(ids, 6, SamplingConfig(), plain=True)
            assert tuple(alone.token_ids) == sequence.token_ids
    # the fallback guard chooses rounds by measured time, and so which draws a round takes: off here
    fixed = Runner.open(plan_path, force=True, batch=2, fallback=False)
    sampled = list(fixed.generate_batches(PROMPTS[:2], max_new_tokens=12, temperature=0.9, seed=5))[0]
    for index, (ids, sequence) in enumerate(zip(sampled.prompt_ids, sampled.result.sequences)):
        alone = fixed.plan_runner.generate(ids, 12, SamplingConfig(0.9, 1.0, 5 + index))
        assert alone.token_ids == sequence.token_ids
    assert sampled.result.sequences[0].token_ids != sampled.result.sequences[1].token_ids


def test_a_llama_cpp_plan_runs_batched(capsys, tmp_path):
    """The default GGUF's stored plan, two prompts at a time in one llama.cpp context: every output plain
    decoding's, or parting at a named near-tie (fast numerics: a batch sums in another order)."""
    from specplan.runtime.lossless import NEAR_TIE

    pytest.importorskip("llama_cpp")
    prompts_path = tmp_path / "prompts.jsonl"
    prompts_path.write_text("".join(json.dumps({"prompt": text}) + "\n" for text in PROMPTS[1:3]))
    capsys.readouterr()
    assert main(["run", str(LLAMA_CPP_PLAN), "--batch", "2", "--prompts", str(prompts_path), "--max-new-tokens", "12",
                 "--json", "--compare-plain", "--threads", "1"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert [record["batch"] for record in records] == [2, 2]
    assert all(record["identical_to_plain"] or record["divergence_gap"] < NEAR_TIE for record in records)


@pytest.mark.parametrize("command", [["bench", str(LLAMA_CPP_PLAN), "--batch", "2"]])
def test_a_llama_cpp_plan_with_batch_is_one_line_before_any_model_loads(command, capsys):
    assert main(command) == 2
    err = capsys.readouterr().err
    assert "drop --batch" in err and len(err.strip().splitlines()) == 1

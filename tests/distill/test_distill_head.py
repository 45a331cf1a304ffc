"""``specplan distill --kind head``: the head's loss falls and teaches it the target's features,
vocabulary trimming, the pipeline's checkpoint as a ``head:DIR`` drafter (lossless in plans),
and the profiler's round-by-round head replay."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from specplan.core.plan import StageShape
from specplan.distill.config import DataConfig, DistillConfig, EvalConfig, TrainConfig
from specplan.distill.data import TrainingSequence
from specplan.distill.head_data import HeadSequence, choose_vocabulary, coverage, target_features
from specplan.distill.head_train import freeze_head, head_sequence_loss, new_head
from specplan.distill.train import train
from specplan.runtime.drafters.head import HeadDrafter
from specplan.profiler.acceptance import AcceptanceCounter
from specplan.profiler.head_acceptance import replay_head
from tests.distill.test_distill import VOCAB, four_layer_llama, synthetic_sequences

CPU = torch.device("cpu")
SMALL = TrainConfig(steps=30, learning_rate=3e-3, warmup_steps=2, min_learning_rate_fraction=1.0,
                    batch_sequences=2, checkpoint_every=10)


def head_data(target, count: int = 6) -> list[HeadSequence]:
    return [HeadSequence(text, target_features(target, text.token_ids)) for text in synthetic_sequences(target, count)]


def mean_loss(head, sequences) -> float:
    with torch.no_grad():
        return sum(float(head_sequence_loss(head, s, SMALL)[0]) for s in sequences) / len(sequences)


def test_training_lowers_the_head_loss_and_keeps_the_lm_head(tmp_path, one_thread):
    target = four_layer_llama(tied=False)
    data = head_data(target)
    head = new_head(target, torch.arange(VOCAB))
    before, lm_head = mean_loss(head, data), head.lm_head.weight.clone()
    result = train(head, data, SMALL, tmp_path / "c.pt", loss_of=head_sequence_loss, freeze=freeze_head)
    assert result.step == 30 and mean_loss(head, data) < 0.8 * before
    assert torch.equal(head.lm_head.weight, lm_head)  # the target's rows stay frozen


def test_vocabulary_keeps_the_most_frequent_target_tokens_and_eos():
    ids = torch.tensor([5, 5, 5, 7, 7, 9, 1])
    text = TrainingSequence("0", ids, 2, torch.tensor([[5], [5], [7], [7], [11], [11]], dtype=torch.int32),
                            torch.zeros(6, 1))
    kept = choose_vocabulary([text], 20, 3, always=[2])
    assert kept.tolist() == [2, 5, 7]
    assert choose_vocabulary([text], 20, 0).tolist() == list(range(20))
    assert coverage(kept, [[5, 7, 9, 2]]) == 0.75


def test_head_replay_counts_what_the_runtime_drafts(tmp_path, one_thread):
    """The profiler's replay of a (briefly trained) head must count the rounds a live engine
    plays on the same text: the same accepted lengths, round for round."""
    from specplan.runtime.drafters.base import SamplingConfig
    from specplan.runtime.engine import SpeculativeEngine

    target = four_layer_llama(tied=False)
    head = new_head(target, torch.arange(VOCAB))
    train(head, head_data(target, 8), dataclasses.replace(SMALL, steps=20), tmp_path / "c.pt",
          loss_of=head_sequence_loss, freeze=freeze_head)
    prompt = [3, 17, 40, 22, 9, 61, 5, 33]
    engine = SpeculativeEngine(target, CPU, set(), HeadDrafter("head", head, CPU), gamma=4)
    result = engine.generate(prompt, 40, SamplingConfig())
    counter = AcceptanceCounter(4, 4)
    replay_head(counter, HeadDrafter("head", head, CPU), target, prompt, list(result.token_ids), CPU)
    rounds = sum(counter.hist)
    live = sorted(count - 1 for count in result.committed_per_forward[:rounds])
    assert rounds >= 5 and sorted(a for a, count in enumerate(counter.hist) for _ in range(count)) == live
    assert sum(counter.hist[1:]) >= 1  # some drafts were accepted: the comparison says something


@pytest.fixture(scope="module")
def head_dir(tmp_path_factory, tiny_model_dir):
    from specplan.distill.head_pipeline import run_head_distill

    output = tmp_path_factory.mktemp("head") / "head"
    config = DistillConfig(kind="head", data=DataConfig(train_limit=4, max_new_tokens=12, top_k=8, batch_size=2, dtype="float32"),
                           train=dataclasses.replace(SMALL, steps=4, checkpoint_every=2),
                           evaluation=EvalConfig(eval_limit=2, max_new_tokens=12, context=32, repeats=1))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        report = run_head_distill(tiny_model_dir, output, config, CPU, vocabulary=200)
    finally:
        torch.set_num_threads(threads)
    return output, report


def test_head_pipeline_writes_a_loadable_head_and_manifest(head_dir, tiny_model_dir):
    from specplan.core.errors import SpecplanError
    from specplan.core.yamlio import read_document

    output, report = head_dir
    assert (output / "head.safetensors").is_file() and (output / "head.json").is_file()
    manifest = read_document(output / "distill.yaml", "distill", SpecplanError)
    assert manifest["kind"] == "head" and manifest["drafter"]["kept_vocabulary"] == 200
    assert manifest["drafter"]["use"] == f"--drafter head:{output}"
    assert report.result.step == 4 and 0.0 <= report.scores[0].alpha <= 1.0 and report.scores[0].t1_ms > 0
    assert 0.0 <= report.eval_coverage <= 1.0


def test_distilled_head_is_lossless_in_plans(head_dir, tiny_model_dir, one_thread):
    from specplan.core.drafter_spec import parse_drafter_spec
    from specplan.runtime.build import build_drafter, build_tree_drafter
    from specplan.models.chat import encode_prompt
    from specplan.runtime.drafters.base import SamplingConfig
    from specplan.runtime.engine import SpeculativeEngine
    from specplan.models.load import load_model

    output, _ = head_dir
    target = load_model(tiny_model_dir, "float32")
    spec = parse_drafter_spec(f"head:{output}")
    assert spec.id == "head-head"
    prompt = encode_prompt(target.tokenizer, "Name three colors of the rainbow.")
    plain = SpeculativeEngine(target.model, CPU, set()).generate(prompt, 16, SamplingConfig()).token_ids
    chain = SpeculativeEngine(target.model, CPU, set(), build_drafter(spec, target, CPU).drafter, gamma=3)
    tree = SpeculativeEngine(target.model, CPU, set(), build_tree_drafter(spec, target, CPU), tree=StageShape("tree", budget=8, depth=3, dynamic=True))
    assert chain.generate(prompt, 16, SamplingConfig()).token_ids == plain
    assert tree.generate(prompt, 16, SamplingConfig()).token_ids == plain


def test_cli_profiles_a_head_and_runs_a_head_plan_losslessly(head_dir, tiny_model_dir, tmp_path, capsys):
    """profile --drafter head:DIR records its latency and round-by-round acceptance; a plan
    with a head tree stage runs through `specplan run` token-identical to plain decoding."""
    import dataclasses
    import json

    from specplan.cli.main import main
    from specplan.core.plan import Stage, StageShape, load_plan, save_plan
    from specplan.core.profile import load_profile

    output, _ = head_dir
    profile_path = tmp_path / "profile.yaml"
    assert main(["profile", "--target", tiny_model_dir, "--drafter", f"head:{output}", "--drafter", "ngram:3",
                 "--quick", "--limit", "2", "--dtype", "float32", "--device", "cpu", "-o", str(profile_path)]) == 0
    profile = load_profile(profile_path)
    head = profile.model("head-head")
    assert head is not None and head.source == f"head:{output}" and len(head.latency[0].ms) == 7
    entry = profile.acceptance_for("head-head", "target", 0.0)
    assert entry is not None and entry.samples > 0 and entry.rank_accept
    assert profile.acceptance_for("ngram-3", "head-head", 0.0) is None  # a head verifies nothing
    plan = load_plan(tmp_path / "plan.yaml")
    for shape in (StageShape("tree", budget=6, depth=3, dynamic=True), StageShape("sequence", gamma=3)):
        save_plan(dataclasses.replace(plan, stages=(Stage("head-head", "target", shape),)), tmp_path / "head.yaml")
        capsys.readouterr()
        # a hand-edited plan (its prediction is the solver's): --force runs it (planner/recheck.py)
        assert main(["run", str(tmp_path / "head.yaml"), "--prompt", "Hello there, hello there", "--max-new-tokens", "12",
                     "--json", "--compare-plain", "--force"]) == 0
        record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert record["identical_to_plain"] is True and record["stages"][0]["drafter"] == "head-head"


def test_the_target_writes_its_own_prompts_reproducibly(tiny_model_dir, one_thread):
    from specplan.runtime.build import eos_ids
    from specplan.distill.self_prompts import self_written_prompts, user_turn_prefix
    from specplan.models.load import load_model

    target = load_model(tiny_model_dir, "float32")
    prefix = target.tokenizer.decode(user_turn_prefix(target.tokenizer))
    assert prefix.endswith("user\n") and "assistant" not in prefix.split("user")[-1]
    first = self_written_prompts(target.model, target.tokenizer, 5, 0, eos_ids(target), batch_size=3, max_tokens=8)
    again = self_written_prompts(target.model, target.tokenizer, 5, 0, eos_ids(target), batch_size=3, max_tokens=8)
    assert 1 <= len(first) <= 5 and [p.text for p in first] == [p.text for p in again]
    assert all(p.text.strip() and p.category == "self-written" for p in first)
    assert [p.prompt_id for p in first] == [f"self-{index}" for index in range(len(first))]


def test_distill_never_trains_on_the_profile_prompts_and_profile_warns_when_it_did(head_dir):
    from specplan.core.drafter_spec import parse_drafter_spec
    from specplan.core.prompts import PROFILE_PROMPTS, Prompt, drafter_training_prompts, profile_prompts
    from specplan.profiler.run import trained_on_calibration

    output, _ = head_dir
    spec = parse_drafter_spec(f"head:{output}")
    assert trained_on_calibration(spec, profile_prompts(PROFILE_PROMPTS)) is None
    calibration = drafter_training_prompts(4)
    assert "trained on 4 of the 4" in trained_on_calibration(spec, calibration)
    assert trained_on_calibration(spec, [Prompt("never-seen", "qa", "hello")]) is None
    assert trained_on_calibration(parse_drafter_spec("ngram:3"), calibration) is None

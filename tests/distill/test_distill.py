"""``specplan distill`` (runtime/distill): layer-skip initialisation, the truncated-KL
training loop (loss falls, seeded, resumable) and the saved checkpoint as a ``model:DIR``
drafter, on tiny random Llamas; one slow run on the real default model."""

from __future__ import annotations

import argparse
import dataclasses

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specplan.core.plan import StageShape
from specplan.core.errors import SpecplanError
from specplan.distill.config import DataConfig, DistillConfig, EvalConfig, TrainConfig
from specplan.distill.data import TrainingSequence, target_top_logprobs
from specplan.distill.init import build_drafter, default_layers, freeze_shared, parse_layers
from specplan.distill.train import run_key, sequence_loss, top_k_kl, train
from specplan.runtime.drafters.layerskip import layer_skip_view

CPU = torch.device("cpu")
VOCAB = 96


def four_layer_llama(tied: bool, seed: int = 0) -> LlamaForCausalLM:
    """4 layers, hidden 32, GQA 4/2, vocab 96, float32, with sharpened logits."""
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         tie_word_embeddings=tied)
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(10.0)
        if not tied:
            model.lm_head.weight.mul_(10.0)
    return model


def synthetic_sequences(target, count: int = 6, length: int = 24, top_k: int = 8) -> list[TrainingSequence]:
    """Random token texts labelled with the target's top-k log-probabilities."""
    generator = torch.Generator().manual_seed(123)
    sequences = []
    for index in range(count):
        ids = torch.randint(0, VOCAB, (length,), generator=generator)
        indices, logprobs = target_top_logprobs(target, ids.tolist(), top_k)
        sequences.append(TrainingSequence(str(index), ids, length // 2, indices, logprobs))
    return sequences


def mean_kl(drafter, sequences) -> float:
    with torch.no_grad():
        return sum(sequence_loss(drafter, s, TrainConfig())[1] for s in sequences) / len(sequences)


def weights(model) -> dict[str, torch.Tensor]:
    return {name: tensor.clone() for name, tensor in model.state_dict().items()}


SMALL = TrainConfig(steps=6, learning_rate=3e-3, warmup_steps=2, min_learning_rate_fraction=1.0,
                    batch_sequences=2, checkpoint_every=3)


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("layers", [(0, 3), (0, 1, 2), (1, 3)])
def test_initial_drafter_is_the_layer_skip_view(tied, layers):
    target = four_layer_llama(tied)
    drafter = build_drafter(target, layers)
    ids = torch.tensor([[5, 9, 17, 3, 44, 2, 90, 7, 7, 1]])
    with torch.no_grad():
        expected = layer_skip_view(target, layers)(input_ids=ids).logits
        got = drafter(input_ids=ids).logits
        full = target(input_ids=ids).logits
    assert drafter.config.num_hidden_layers == len(layers)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(got, full, atol=1e-3)  # it really skips layers
    # the drafter owns its weights: training it leaves the target alone
    before = target.model.layers[layers[-1]].mlp.up_proj.weight.clone()
    with torch.no_grad():
        drafter.model.layers[-1].mlp.up_proj.weight.add_(1.0)
    torch.testing.assert_close(target.model.layers[layers[-1]].mlp.up_proj.weight, before)


def test_frozen_embedding_and_head_trainable_layers():
    drafter = build_drafter(four_layer_llama(tied=True), (0, 3))
    trainable = {id(p) for p in freeze_shared(drafter)}
    assert id(drafter.model.embed_tokens.weight) not in trainable
    assert id(drafter.lm_head.weight) not in trainable
    assert id(drafter.model.layers[1].self_attn.q_proj.weight) in trainable
    assert id(drafter.model.norm.weight) in trainable


def test_layer_choices():
    assert default_layers(30, 4) == (0, 1, 2, 3)
    assert default_layers(30, 1) == (0,)
    assert parse_layers("0,1,28,29", 30) == (0, 1, 28, 29)
    assert parse_layers("29,0,0", 30) == (0, 29)
    assert parse_layers("2", 30) == (0, 1)
    for bad in ("30", "0", "0,30", "a,b", "x"):
        with pytest.raises(SpecplanError):
            parse_layers(bad, 30)


def test_top_k_kl_is_a_divergence():
    logp = torch.log_softmax(torch.randn(5, 20), -1)
    top_p, top_i = torch.topk(logp, 4, -1)
    assert torch.allclose(top_k_kl(top_p, top_p), torch.zeros(5), atol=1e-6)
    other = torch.log_softmax(torch.randn(5, 20), -1).gather(-1, top_i)
    assert (top_k_kl(top_p, other) > 0).all()
    # the bucketed KL never exceeds the full KL
    q = torch.log_softmax(torch.randn(5, 20), -1)
    full = (logp.exp() * (logp - q)).sum(-1)
    assert (top_k_kl(top_p, q.gather(-1, top_i)) <= full + 1e-6).all()


def perturbed_drafter(target, layers):
    """The layer-skip drafter with noise on its decoder layers, so that it starts far from the target."""
    drafter = build_drafter(target, layers)
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for parameter in drafter.model.layers.parameters():
            if parameter.dim() == 2:
                parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.3)
    return drafter


@pytest.mark.parametrize("cross_entropy_weight", [0.0, 0.5])
def test_training_reduces_the_kl(tmp_path, one_thread, cross_entropy_weight):
    target = four_layer_llama(tied=True)
    sequences = synthetic_sequences(target)
    drafter = perturbed_drafter(target, (0, 3))
    before = mean_kl(drafter, sequences)
    config = dataclasses.replace(SMALL, steps=40, cross_entropy_weight=cross_entropy_weight)
    result = train(drafter, sequences, config, tmp_path / "checkpoint.pt")
    after = mean_kl(drafter, sequences)
    assert result.step == 40 and result.stopped_by == "steps"
    assert after < 0.7 * before, (before, after)
    assert not any(p.requires_grad for p in drafter.parameters())


def test_same_seed_same_weights_other_seed_other_weights(tmp_path, one_thread):
    target = four_layer_llama(tied=True)
    sequences = synthetic_sequences(target)
    runs = []
    for number, seed in enumerate((0, 0, 1)):
        drafter = build_drafter(target, (0, 3))
        train(drafter, sequences, dataclasses.replace(SMALL, seed=seed), tmp_path / f"run{number}.pt")
        runs.append(weights(drafter))
    for name in runs[0]:
        assert torch.equal(runs[0][name], runs[1][name]), name
    assert any(not torch.equal(runs[0][name], runs[2][name]) for name in runs[0])


def test_resume_continues_from_the_checkpoint(tmp_path, one_thread):
    target = four_layer_llama(tied=False)
    sequences = synthetic_sequences(target)
    straight = build_drafter(target, (0, 2))
    whole = train(straight, sequences, SMALL, tmp_path / "straight.pt")

    checkpoint = tmp_path / "interrupted.pt"
    first = build_drafter(target, (0, 2))
    half = train(first, sequences, dataclasses.replace(SMALL, steps=3), checkpoint)  # "interrupted" after 3 steps
    resumed_drafter = build_drafter(target, (0, 2))  # a fresh process starts from the initial weights
    resumed = train(resumed_drafter, sequences, SMALL, checkpoint)
    assert half.step == 3 and resumed.step == 6
    assert resumed.losses[:3] == half.losses and resumed.losses == whole.losses
    for name, tensor in weights(straight).items():
        assert torch.equal(tensor, weights(resumed_drafter)[name]), name
    with pytest.raises(SpecplanError, match="another distillation run"):
        train(build_drafter(target, (0, 2)), sequences, dataclasses.replace(SMALL, learning_rate=1e-4), checkpoint,
              key=run_key(dataclasses.replace(SMALL, learning_rate=1e-4), {}))


def test_budget_stops_training_and_saves(tmp_path):
    target = four_layer_llama(tied=True)
    drafter = build_drafter(target, (0, 3))
    result = train(drafter, synthetic_sequences(target), SMALL, tmp_path / "c.pt", deadline=0.0)
    assert result.stopped_by == "budget" and result.step == 0
    assert (tmp_path / "c.pt").is_file()


def tiny_config(steps: int = 4) -> DistillConfig:
    return DistillConfig(
        layers=(0, 3), num_layers=2,
        data=DataConfig(train_limit=4, max_new_tokens=12, top_k=8, batch_size=2, dtype="float32"),
        train=dataclasses.replace(SMALL, steps=steps, checkpoint_every=2),
        evaluation=EvalConfig(eval_limit=2, max_new_tokens=12, context=32, repeats=1),
    )


@pytest.fixture(scope="module")
def distilled(tmp_path_factory, tiny_model_dir):
    """A drafter distilled from the tiny checkpoint (real tokenizer) in a few seconds."""
    from specplan.distill.pipeline import run_distill

    output = tmp_path_factory.mktemp("distilled") / "drafter"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        report = run_distill(tiny_model_dir, output, tiny_config(), CPU)
    finally:
        torch.set_num_threads(threads)
    return output, report


def test_pipeline_writes_a_checkpoint_and_manifest(distilled, tiny_model_dir):
    from specplan.models.load import fingerprint, load_model
    from specplan.core.yamlio import read_document

    output, report = distilled
    assert (output / "config.json").is_file() and (output / "model.safetensors").is_file()
    assert (output / "tokenizer.json").is_file()
    manifest = read_document(output / "distill.yaml", "distill", SpecplanError)
    assert manifest["target"]["fingerprint"] == fingerprint(tiny_model_dir)
    assert manifest["training"]["steps"] == 4 and manifest["training"]["seed"] == 0
    train_ids = {int(i) for i in manifest["data"]["train_prompts"]}
    eval_ids = {int(i) for i in manifest["evaluation"]["eval_prompts"]}
    assert train_ids and all(i % 4 == 0 for i in train_ids)
    assert eval_ids and not any(i % 4 == 0 for i in eval_ids)  # evaluated only on held-out prompts
    names = [entry["name"] for entry in manifest["evaluation"]["drafters"]]
    assert names == ["distilled", "layerskip:2", "layerskip:0,3"]
    loaded = load_model(str(output))
    assert loaded.model.config.num_hidden_layers == 2
    assert 0.0 <= report.scores[0].alpha <= 1.0 and report.scores[0].t1_ms > 0


def test_distilled_drafter_is_lossless_as_model_drafter(distilled, tiny_model_dir, one_thread):
    from specplan.core.drafter_spec import parse_drafter_spec
    from specplan.runtime.build import build_drafter as build_runtime_drafter
    from specplan.runtime.build import build_tree_drafter
    from specplan.models.chat import encode_prompt
    from specplan.runtime.drafters.base import SamplingConfig
    from specplan.runtime.engine import SpeculativeEngine
    from specplan.models.load import load_model

    output, _ = distilled
    target = load_model(tiny_model_dir, "float32")
    spec = parse_drafter_spec(f"model:{output}")
    built = build_runtime_drafter(spec, target, CPU)
    prompt = encode_prompt(target.tokenizer, "Name three colors of the rainbow.")
    plain = SpeculativeEngine(target.model, CPU, set()).generate(prompt, 20, SamplingConfig())
    chain = SpeculativeEngine(target.model, CPU, set(), built.drafter, 4).generate(prompt, 20, SamplingConfig())
    tree = SpeculativeEngine(target.model, CPU, set(), build_tree_drafter(spec, target, CPU, built.model),
                             tree=StageShape("tree", budget=8, depth=3, dynamic=True)).generate(prompt, 20, SamplingConfig())
    assert chain.token_ids == plain.token_ids == tree.token_ids
    assert chain.target_forwards <= plain.target_forwards


def test_rerun_reuses_data_and_resumes(distilled, tiny_model_dir):
    from specplan.distill.pipeline import run_distill

    output, _ = distilled
    data = output / "distill-cache" / "data.pt"
    stamp = data.stat().st_mtime_ns
    report = run_distill(tiny_model_dir, output, tiny_config(steps=6), CPU)
    assert data.stat().st_mtime_ns == stamp  # the target's outputs were not generated again
    assert report.result.step == 6 and len(report.result.losses) == 6


def parse(argv):
    from specplan.cli.distill import add_parser as add_distill_parser

    parser = argparse.ArgumentParser()
    add_distill_parser(parser.add_subparsers())
    return parser.parse_args(["distill", *argv])


@pytest.mark.parametrize("argv, message", [
    (["--kind", "head", "--vocab", "-1"], "--vocab"),
    (["--self-prompts", "-2"], "--self-prompts"),
    (["--budget-minutes", "0"], "--budget-minutes"),
    (["--steps", "0"], "--steps"),
    (["--sampled", "-1"], "--sampled"),
    (["--learning-rate", "0"], "--learning-rate"),
    (["--threads", "0"], "--threads"),
])
def test_command_rejects_bad_input(argv, message, capsys):
    """Out-of-range numbers are usage errors: exit 2 and one line naming the option, before any work."""
    from specplan.cli.main import build_parser

    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["distill", *argv])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_command_refuses_a_foreign_directory(tmp_path, tiny_model_dir):
    from specplan.cli.distill import command as command_distill

    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(SpecplanError, match="did not write"):
        command_distill(parse([tiny_model_dir, "-o", str(tmp_path), "--layers", "2"]))
    with pytest.raises(SpecplanError, match="--layers"):
        command_distill(parse([tiny_model_dir, "-o", str(tmp_path / "new"), "--layers", "9"]))


@pytest.mark.slow
def test_distill_default_model_end_to_end(tmp_path):
    """The real default model: a 2-layer drafter, a few steps; it loads and is lossless in float32."""
    from specplan.core.drafter_spec import parse_drafter_spec
    from specplan.runtime.build import build_drafter as build_runtime_drafter
    from specplan.runtime.build import eos_ids
    from specplan.models.chat import encode_prompt
    from specplan.distill.pipeline import run_distill
    from specplan.runtime.drafters.base import SamplingConfig
    from specplan.runtime.engine import SpeculativeEngine
    from specplan.models.load import load_model

    config = DistillConfig(layers=(0, 29), num_layers=2,
                           data=DataConfig(train_limit=2, max_new_tokens=8, top_k=16),
                           train=dataclasses.replace(SMALL, steps=2),
                           evaluation=EvalConfig(eval_limit=1, max_new_tokens=8, context=32, repeats=1))
    report = run_distill("default", tmp_path / "drafter", config, CPU)
    assert report.result.step == 2 and report.scores[0].t1_ms < report.target_t1_ms
    target = load_model("default", "float32")
    drafter = build_runtime_drafter(parse_drafter_spec(f"model:{tmp_path / 'drafter'}"), target, CPU).drafter
    prompt = encode_prompt(target.tokenizer, "Write one sentence about the sea.")
    plain = SpeculativeEngine(target.model, CPU, eos_ids(target)).generate(prompt, 16, SamplingConfig())
    speculative = SpeculativeEngine(target.model, CPU, eos_ids(target), drafter, 3).generate(prompt, 16, SamplingConfig())
    assert speculative.token_ids == plain.token_ids


def test_chunked_top_logprobs_equal_one_full_softmax():
    target = four_layer_llama(tied=True)
    token_ids = [int(t) for t in torch.randint(0, target.config.vocab_size, (23,))]
    indices, values = target_top_logprobs(target, token_ids, 5, rows=4)
    with torch.no_grad():
        logits = target(input_ids=torch.tensor([token_ids])).logits[0, :-1].float()
    full = torch.topk(torch.log_softmax(logits, dim=-1), 5, dim=-1)
    assert indices.shape == (22, 5)
    assert torch.equal(indices.long(), full.indices)
    torch.testing.assert_close(values, full.values, atol=1e-5, rtol=1e-5)


def test_decode_batches_bound_count_and_tokens():
    from specplan.distill.data import decode_batches

    lengths = [10, 500, 20, 30, 400, 15, 700, 25]
    batches = decode_batches(lengths, batch_size=3, token_budget=1000)
    assert sorted(index for batch in batches for index in batch) == list(range(len(lengths)))
    for batch in batches:
        assert len(batch) <= 3 and (len(batch) == 1 or len(batch) * max(lengths[i] for i in batch) <= 1000)
    assert [lengths[i] for i in batches[0]] == [10, 15, 20]  # shortest first, similar lengths together
    assert [6] in batches  # a 700-token prompt decodes alone


def test_a_rerun_after_a_crash_reuses_the_decoded_answers(distilled, tiny_model_dir, monkeypatch):
    """The answers are saved before the logits pass: a rerun does not decode again."""
    from specplan.distill import pipeline
    from specplan.models.load import load_model

    output, _ = distilled
    (output / "distill-cache" / "data.pt").unlink()
    monkeypatch.setattr(pipeline, "decode_answers", lambda *args, **kwargs: pytest.fail("decoded again"))
    prompts, sequences = pipeline.training_data(load_model(tiny_model_dir, "float32"), tiny_config(), output / "distill-cache")
    assert len(sequences) == len(prompts) and (output / "distill-cache" / "data.pt").is_file()

"""A head in EAGLE-3's layout: trained by distill, saved and loaded as specplan's head, written as
the engines' EAGLE-3 checkpoint (names in the recorded vLLM loader), loaded back, proposing the
same tokens; lossless in the engine."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from safetensors.torch import load_file

from specplan.distill.head_train import freeze_head, head_sequence_loss, new_head
from specplan.distill.train import train
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.drafters.head import HeadDrafter
from specplan.runtime.drafters.head_eagle3 import Eagle3Head, load_eagle3, write_eagle3
from specplan.runtime.drafters.head_model import load_head, read_head, save_head
from specplan.runtime.engine import SpeculativeEngine

from tests.engine_records import load_record
from tests.distill.test_distill import VOCAB, four_layer_llama
from tests.distill.test_distill_head import SMALL, head_data

CPU = torch.device("cpu")
PROMPTS = ([3, 17, 40, 22, 9, 61, 5, 33], [1, 2, 3, 4, 5], [70, 12, 12, 80, 4, 44, 90])
KEPT = torch.tensor([0, 1, 2, 3, 4, 5, 9, 12, 17, 22, 33, 40, 44, 61, 70, 80, 90] + list(range(50, 60)))


class Recording(HeadDrafter):
    """A head drafter that keeps every chain it proposes."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.proposed: list[tuple[int, ...]] = []

    def propose(self, committed, gamma, sampling, generator):
        proposal = super().propose(committed, gamma, sampling, generator)
        self.proposed.append(proposal.tokens)
        return proposal


def proposals(target, head) -> tuple[list, list]:
    """(each prompt's output, every chain proposed) for greedy decoding with ``head`` drafting."""
    drafter = Recording("head", head, CPU)
    outputs = [SpeculativeEngine(target, CPU, set(), drafter, gamma=4).generate(list(prompt), 24, SamplingConfig())
               .token_ids for prompt in PROMPTS]
    return outputs, drafter.proposed


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    target = four_layer_llama(tied=False)
    head = new_head(target, KEPT[torch.randperm(len(KEPT))], "eagle3")  # any order: kept ids are sorted
    train(head, head_data(target, 6), dataclasses.replace(SMALL, steps=20), tmp_path_factory.mktemp("c") / "c.pt",
          loss_of=head_sequence_loss,
          freeze=freeze_head)
    with torch.no_grad():  # every tensor its own: a loader that mixes two up drafts differently
        for name, parameter in head.named_parameters():
            parameter.add_(0.3 * parameter.abs().mean() * torch.randn_like(parameter))
    yield target, head.eval()
    torch.set_num_threads(threads)


def test_the_eagle3_head_is_lossless_and_drafts_something(trained):
    target, head = trained
    outputs, proposed = proposals(target, head)
    plain = [SpeculativeEngine(target, CPU, set()).generate(list(prompt), 24, SamplingConfig()).token_ids
             for prompt in PROMPTS]
    assert outputs == plain
    assert all(token in set(KEPT.tolist()) for chain in proposed for token in chain)
    assert len({chain for chain in proposed}) > 3


def test_specplan_head_files_keep_the_layout(trained, tmp_path):
    target, head = trained
    save_head(head, tmp_path, {})
    assert json.loads((tmp_path / "head.json").read_text())["layout"] == "eagle3"
    loaded = load_head(tmp_path, target, torch.float32, CPU)
    assert isinstance(loaded, Eagle3Head) and isinstance(read_head(tmp_path), Eagle3Head)
    assert proposals(target, loaded) == proposals(target, head)


def test_the_written_checkpoint_has_the_engine_names_and_drafts_the_same(trained, tmp_path):
    target, head = trained
    write_eagle3(head, tmp_path / "eagle3")
    config = json.loads((tmp_path / "eagle3" / "config.json").read_text())
    tensors = load_file(str(tmp_path / "eagle3" / "model.safetensors"))
    record = load_record("eagle3")
    assert set(config) <= record.sections["config"], set(config) - record.sections["config"]
    assert set(config["eagle_config"]) <= record.sections["eagle_config"]
    assert config["architectures"] == ["LlamaForCausalLMEagle3"] and config["eagle_config"]["use_aux_hidden_state"] is False
    assert set(tensors) <= record.sections["weight"], set(tensors) - record.sections["weight"]
    assert config["draft_vocab_size"] == len(KEPT) == tensors["lm_head.weight"].shape[0]
    assert config["tie_word_embeddings"] is False  # SGLang would read a tied lm_head as the embedding
    kept = sorted(KEPT.tolist())
    assert (tensors["d2t"] + torch.arange(len(kept))).tolist() == kept  # target id = draft id + d2t
    assert tensors["t2d"].nonzero().flatten().tolist() == kept
    loaded = load_eagle3(tmp_path / "eagle3", target, torch.float32, CPU)
    assert proposals(target, loaded) == proposals(target, head)
    assert proposals(target, load_head(tmp_path / "eagle3", target, torch.float32, CPU)) == proposals(target, head)


def test_a_full_vocabulary_head_has_no_map(tmp_path):
    target = four_layer_llama(tied=False)
    head = new_head(target, torch.arange(VOCAB), "eagle3")
    write_eagle3(head, tmp_path)
    assert not {"d2t", "t2d"} & set(load_file(str(tmp_path / "model.safetensors")))
    loaded = load_eagle3(tmp_path, target, torch.float32, CPU)
    ids, features = torch.tensor([[5, 6, 7]]), torch.randn(1, 3, 32)
    with torch.no_grad():
        assert torch.allclose(loaded(ids, features, use_cache=False).logits, head(ids, features, use_cache=False).logits)


def test_the_profiler_times_an_eagle3_head_as_a_head(tiny_model_dir, tmp_path, monkeypatch, one_thread):
    """`profile --drafter head:DIR` on a head of EAGLE-3's layout: timed after a target step as a
    head is, and its acceptance measured."""
    import specplan.profiler.run as run
    from specplan.core.drafter_spec import parse_drafter_spec
    from specplan.core.prompts import profile_prompts
    from specplan.models.load import load_model

    target = load_model(tiny_model_dir, "float32", "cpu")
    save_head(new_head(target.model, torch.arange(300), "eagle3"), tmp_path / "h3", {})
    timed = []
    original = run.measure_head_latency
    monkeypatch.setattr(run, "measure_head_latency", lambda head, *a, **k: timed.append(head) or original(head, *a, **k))
    profile = run.run_profile(target, [parse_drafter_spec(f"head:{tmp_path / 'h3'}")], profile_prompts(2), CPU,
                              run.ProfileSettings.quick())
    caches = len(profile.calibration.get("contexts", [profile.calibration["context"]]))  # timed over each
    assert len(timed) == caches and all(isinstance(head, Eagle3Head) for head in timed)
    assert profile.model("head-h3").latency and profile.acceptance[0].drafter == "head-h3"


def test_distill_trains_an_eagle3_head_that_export_writes(tiny_model_dir, tmp_path, one_thread):
    """`specplan distill --kind head --layout eagle3` end to end (a few steps), then the checkpoint."""
    from specplan.distill.config import DataConfig, DistillConfig, EvalConfig
    from specplan.distill.head_pipeline import run_head_distill
    from specplan.models.load import load_model

    config = DistillConfig(kind="head", data=DataConfig(train_limit=2, max_new_tokens=8, top_k=8, batch_size=2,
                                                        dtype="float32"),
                           train=dataclasses.replace(SMALL, steps=2, checkpoint_every=1),
                           evaluation=EvalConfig(eval_limit=1, max_new_tokens=8, context=16, repeats=1))
    report = run_head_distill(tiny_model_dir, tmp_path / "head", config, CPU, vocabulary=200, layout="eagle3")
    assert report.result.step == 2 and json.loads((tmp_path / "head" / "head.json").read_text())["layout"] == "eagle3"
    target = load_model(tiny_model_dir, "float32", "cpu").model
    head = load_head(tmp_path / "head", target, torch.float32, CPU)
    write_eagle3(read_head(tmp_path / "head"), tmp_path / "eagle3")
    loaded = load_eagle3(tmp_path / "eagle3", target, torch.float32, CPU)
    ids = torch.tensor([[5, 6, 7, 8]])
    features = torch.randn(1, 4, target.config.hidden_size)
    with torch.no_grad():
        assert torch.equal(loaded(ids, features, use_cache=False).logits, head(ids, features, use_cache=False).logits)

"""4-bit targets (quant/): NF4 and GPTQ on a tiny random Llama, lossless speculation on the
NF4 target, missing backends, quality metrics, quant-aware profiles (~20 s for GPTQ: GPTQModel
itself takes ~10 s to import and start; the real-model GPTQ run is measurements/quant_quality.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from specplan.core.errors import BackendMissingError
from specplan.quant.methods import GPTQ, NF4, method_of_label, normalize_quants, parse_method

PROMPTS = ([5, 17, 301, 99, 5, 17, 301], [1000, 2000, 3000, 1000, 2000], [42, 7, 42, 7, 42, 7, 42, 9])


@pytest.fixture(scope="module")
def tiny_dir(default_model_dir, tmp_path_factory) -> str:
    """A tiny random Llama (hidden 64: bitsandbytes' CPU NF4 path needs in-features divisible
    by its block of 64; conftest's tiny model has 32) with the default model's tokenizer."""
    from tests.tiny_checkpoint import save_tiny_llama

    return save_tiny_llama(tmp_path_factory.mktemp("tiny-quant-model"), default_model_dir, hidden_size=64)


@pytest.fixture(scope="module")
def quant_cache(tiny_dir, tmp_path_factory):
    """A private $SPECPLAN_CACHE for the module (after the default model was converted in the real one)."""
    with pytest.MonkeyPatch.context() as patch:
        path = tmp_path_factory.mktemp("quant-cache")
        patch.setenv("SPECPLAN_CACHE", str(path))
        yield path


@pytest.fixture(scope="module")
def nf4_tiny(quant_cache, tiny_dir):
    """The tiny model as an NF4 target computing in float32 (greedy identity needs float32)."""
    pytest.importorskip("bitsandbytes")
    from specplan.quant.load import load_quantized

    return load_quantized(tiny_dir, "nf4", "float32", "cpu")


def _greedy(model, drafter=None, gamma=0, prompt=PROMPTS[0], tokens=24):
    from specplan.runtime.drafters.base import SamplingConfig
    from specplan.runtime.engine import SpeculativeEngine

    engine = SpeculativeEngine(model, torch.device("cpu"), set(), drafter, gamma)
    return engine.generate(list(prompt), tokens, SamplingConfig())


def test_methods_and_labels(tiny_model_dir):
    assert parse_method("nf4") is NF4 and method_of_label("gptq-w4g64") is GPTQ
    assert normalize_quants(None) == ["none"] and normalize_quants(["gptq", "none", "gptq"]) == ["gptq", "none"]
    with pytest.raises(Exception, match="unknown quantization method"):
        parse_method("int3")
    from specplan.quant.checkpoint import resolve_method

    with pytest.raises(Exception, match="divisible by 64"):
        resolve_method("nf4", tiny_model_dir)  # hidden 32
    assert resolve_method("gptq", tiny_model_dir).label == "gptq-w4g32"


def test_nf4_tiny_loads_and_runs(nf4_tiny, tiny_dir):
    from bitsandbytes.nn import Linear4bit

    from specplan.models.load import load_model

    quantized = [m for m in nf4_tiny.model.modules() if isinstance(m, Linear4bit)]
    assert len(quantized) == 4 * 7  # q, k, v, o, gate, up, down in each of 4 layers
    reference = load_model(tiny_dir, "float32")
    ids = torch.tensor([PROMPTS[0]])
    with torch.no_grad():
        logits = nf4_tiny.model(ids).logits.float()
        exact = reference.model(ids).logits
    assert torch.isfinite(logits).all() and logits.dtype == torch.float32
    assert 0 < (logits - exact).abs().max() < 0.5 * exact.abs().max()  # quantized, yet close
    assert nf4_tiny.fingerprint != reference.fingerprint


def test_nf4_checkpoint_reloads_identically(nf4_tiny, tiny_dir):
    """The cached checkpoint (saved before any forward: bitsandbytes repacks CPU weights on
    the first forward and a checkpoint saved after that reloads wrong) gives the same logits."""
    from specplan.quant.checkpoint import read_manifest
    from specplan.quant.load import load_quantized

    again = load_quantized(tiny_dir, "nf4", "float32", "cpu")
    assert read_manifest(again.path)["label"] == "nf4" and again.fingerprint == nf4_tiny.fingerprint
    ids = torch.tensor([PROMPTS[1]])
    with torch.no_grad():
        assert torch.equal(again.model(ids).logits, nf4_tiny.model(ids).logits)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_speculation_on_nf4_target_is_its_own_greedy(nf4_tiny, prompt):
    from specplan.runtime.drafters.ngram import NgramDrafter

    plain = _greedy(nf4_tiny.model, prompt=prompt)
    speculative = _greedy(nf4_tiny.model, NgramDrafter(3), 4, prompt=prompt)
    assert speculative.token_ids == plain.token_ids
    assert speculative.target_forwards <= plain.target_forwards


def test_load_model_hook_loads_the_variant(nf4_tiny, tiny_dir):
    from specplan.quant.load import load_model_variant

    loaded = load_model_variant(tiny_dir, "float32", "cpu", quant="nf4")
    assert loaded.fingerprint == nf4_tiny.fingerprint and loaded.path == nf4_tiny.path


@pytest.mark.parametrize("method, module", [("nf4", "bitsandbytes"), ("gptq", "gptqmodel"), ("gptq", "optimum")])
def test_missing_backend_is_one_line_naming_the_extra(monkeypatch, method, module):
    from specplan.quant.backends import require_backend

    monkeypatch.setitem(sys.modules, module, None)  # `import module` now raises ImportError
    with pytest.raises(BackendMissingError) as error:
        require_backend(parse_method(method))
    message = str(error.value)
    assert f"specplan[{method}]" in message and module in message and "\n" not in message


def test_missing_backend_exits_2_through_the_cli(monkeypatch, capsys, tiny_dir, tmp_path):
    from specplan.cli.main import main

    monkeypatch.setitem(sys.modules, "bitsandbytes", None)
    monkeypatch.setitem(sys.modules, "gptqmodel", None)
    assert main(["quantize", tiny_dir, "--method", "nf4", "-o", str(tmp_path / "q")]) == 2
    assert main(["profile", "--target", tiny_dir, "--quant", "gptq", "--drafter", "ngram:3", "--quick",
                 "--limit", "1", "--device", "cpu", "-o", str(tmp_path / "p.yaml")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and "specplan[nf4]" in lines[0] and "specplan[gptq]" in lines[1]


def test_quality_of_a_model_against_itself_and_nf4(nf4_tiny, tiny_dir):
    from specplan.core.prompts import Prompt
    from specplan.bench.quant_quality import compare_quality, reference_outputs
    from specplan.models.load import load_model

    reference = load_model(tiny_dir, "float32")
    prompts = [Prompt("1", "test", "Name three colours."), Prompt("2", "test", "Count to five.")]
    references = reference_outputs(reference, prompts, 12)
    same = compare_quality(reference, "none", references, 12)
    assert same.greedy_agreement == 1.0 and same.identical_outputs == 2 and same.matching_prefix == 12
    nf4 = compare_quality(nf4_tiny, "nf4", references, 12)
    assert 0.0 <= nf4.greedy_agreement <= 1.0 and nf4.perplexity > 1.0
    assert nf4.perplexity != same.perplexity


def test_profile_with_quant_nf4_target_and_variant(quant_cache, tiny_dir, tmp_path):
    pytest.importorskip("bitsandbytes")
    from specplan.cli.main import main
    from specplan.core.profile import load_profile

    path = tmp_path / "profile.yaml"
    code = main(["profile", "--target", tiny_dir, "--quant", "nf4", "--quant", "none", "--drafter", "ngram:3",
                 "--drafter", "layerskip:2", "--quick", "--limit", "1", "--dtype", "float32", "--device", "cpu",
                 "-o", str(path)])
    assert code == 0
    profile = load_profile(path)
    models = {m.id: m for m in profile.models}
    assert set(models) == {"target", "layerskip-2", "target-float32"}
    assert (models["target"].quant, models["target"].role) == ("nf4", "target")
    assert models["layerskip-2"].quant == "nf4"  # it shares the 4-bit weights
    assert (models["target-float32"].quant, models["target-float32"].role) == ("none", "variant")
    assert all(len(m.latency[0].ms) == 7 for m in profile.models)
    assert {a.verifier for a in profile.acceptance} == {"target", "layerskip-2"}  # layerskip-2: a candidate middle
    assert ("ngram-3", "layerskip-2") in {(a.drafter, a.verifier) for a in profile.acceptance}
    assert (tmp_path / "plan.yaml").is_file()


def test_gptq_tiny_quantizes_loads_and_runs(quant_cache, tiny_dir):
    pytest.importorskip("gptqmodel")
    from specplan.quant.checkpoint import quantize
    from specplan.quant.load import load_quantized
    from specplan.models.load import load_model

    made = quantize(tiny_dir, "gptq", calibration_limit=8)
    assert made.method.label == "gptq-w4g64"  # hidden size 64: the largest group dividing every width
    loaded = load_quantized(tiny_dir, "gptq", "bfloat16", "cpu")  # from the cache
    assert loaded.fingerprint == made.fingerprint
    kinds = {type(m).__name__ for m in loaded.model.modules()}
    assert "TorchAtenLinear" in kinds
    ids = torch.tensor([PROMPTS[0]])
    with torch.no_grad():
        logits = loaded.model(ids).logits.float()
        exact = load_model(tiny_dir, "float32").model(ids).logits
    assert torch.isfinite(logits).all()
    assert (logits - exact).abs().max() < 0.5 * exact.abs().max()


def test_run_plan_on_nf4_target(quant_cache, tiny_dir, tmp_path, capsys):
    pytest.importorskip("bitsandbytes")
    import json

    from specplan.cli.main import main

    path = tmp_path / "profile.yaml"
    assert main(["profile", "--target", tiny_dir, "--quant", "nf4", "--drafter", "ngram:3", "--quick", "--limit", "1",
                 "--dtype", "float32", "--device", "cpu", "-o", str(path)]) == 0
    capsys.readouterr()
    assert main(["run", str(tmp_path / "plan.yaml"), "--prompt", "Hello there", "--max-new-tokens", "12", "--json",
                 "--compare-plain"]) == 0
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert record["identical_to_plain"] is True


def test_damaged_checkpoint_in_the_cache_is_rebuilt_not_loaded(nf4_tiny, tiny_dir, capsys):
    """The cached checkpoint is a cache entry: a weights file cut short is found by its manifest's
    sizes on the next open and the checkpoint is made again, giving the same logits."""
    from specplan.quant.checkpoint import quantize
    from specplan.quant.load import load_quantized

    weights = next(Path(nf4_tiny.path).glob("*.safetensors"))
    data = weights.read_bytes()
    weights.unlink()  # a new file: the loaded model may still map the old one's pages
    weights.write_bytes(data[: len(data) // 2])
    again = quantize(tiny_dir, "nf4", dtype="float32")
    assert again.seconds > 0 and "incomplete or corrupt" in capsys.readouterr().err
    reloaded = load_quantized(tiny_dir, "nf4", "float32", "cpu")
    ids = torch.tensor([PROMPTS[1]])
    with torch.no_grad():
        assert torch.equal(reloaded.model(ids).logits, nf4_tiny.model(ids).logits)

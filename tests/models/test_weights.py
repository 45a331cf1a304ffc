"""Loading a model folder tensor by tensor (models/weights.py): the weights transformers would load,
at the dtype asked, without holding the float32 file in memory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from specplan.core.errors import ModelError
from specplan.models import weights
from specplan.models.load import fingerprint, load_model


def _reference(folder: str, dtype: torch.dtype) -> torch.nn.Module:
    """transformers' own load of ``folder`` (memory-mapped), the slow reference."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation="sdpa").eval()


def _tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Parameters and every buffer (the rotary frequencies are not in the state dict)."""
    return {**dict(model.named_buffers()), **model.state_dict()}


def _assert_same(loaded: torch.nn.Module, expected: torch.nn.Module) -> None:
    got, want = _tensors(loaded), _tensors(expected)
    assert got.keys() == want.keys()
    for name, tensor in want.items():
        assert got[name].dtype == tensor.dtype, name
        assert torch.equal(got[name], tensor), name


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_load_equals_transformers_own_load(tiny_model_dir, dtype):
    loaded = load_model(tiny_model_dir, dtype)
    reference = _reference(tiny_model_dir, loaded.model.dtype)
    _assert_same(loaded.model, reference)
    assert loaded.model.lm_head.weight is loaded.model.model.embed_tokens.weight  # tied, as transformers ties
    assert loaded.model.generation_config.eos_token_id == reference.generation_config.eos_token_id
    assert loaded.model.config._attn_implementation == "sdpa" and not loaded.model.training


def test_bfloat16_weights_are_the_float32_ones_cast(tiny_model_dir):
    exact = load_model(tiny_model_dir, "float32").model.state_dict()
    half = load_model(tiny_model_dir, "bfloat16").model.state_dict()
    assert all(tensor.dtype == torch.float32 for tensor in exact.values())  # float32 reads float32 weights
    for name, tensor in exact.items():
        assert half[name].dtype == torch.bfloat16 and torch.equal(half[name], tensor.to(torch.bfloat16)), name


@pytest.mark.parametrize("chunk_bytes", [2**20, 1000 * 128], ids=["rows-divide", "last-block-short"])
def test_a_large_tensor_is_cast_in_row_blocks(tiny_model_dir, monkeypatch, chunk_bytes):
    """The embedding (49152 x 32 float32, 6 MiB) read in blocks (8192 rows, or 1000 rows with a
    short last block, as the 1.5B's 151936-row embedding has) equals the whole tensor cast."""
    files = weights.safetensors_files(Path(tiny_model_dir))
    whole = weights.read_state_dict(files, torch.bfloat16)
    monkeypatch.setattr(weights, "CHUNK_BYTES", chunk_bytes)
    blocks = weights.read_state_dict(files, torch.bfloat16)
    assert whole.keys() == blocks.keys()
    assert all(torch.equal(whole[name], blocks[name]) for name in whole)


def test_sharded_folder_loads_through_its_index(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    model.save_pretrained(tmp_path, max_shard_size="2MB")
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(tmp_path)
    assert len(weights.safetensors_files(tmp_path)) > 1
    _assert_same(load_model(str(tmp_path), "bfloat16").model, _reference(str(tmp_path), torch.bfloat16))


def test_one_folder_and_fingerprint_serve_every_dtype(tiny_model_dir):
    """No copy per dtype: a cache made before this loader (and the profiles that name its
    fingerprint) keeps matching."""
    before = sorted(path.name for path in Path(tiny_model_dir).iterdir())
    loads = [load_model(tiny_model_dir, dtype) for dtype in ("float32", "bfloat16", "float16")]
    assert {loaded.path for loaded in loads} == {tiny_model_dir}
    assert {loaded.fingerprint for loaded in loads} == {fingerprint(tiny_model_dir)}
    assert sorted(path.name for path in Path(tiny_model_dir).iterdir()) == before


def test_truncated_weights_are_one_line_naming_the_folder(tiny_model_dir, tmp_path):
    for item in Path(tiny_model_dir).iterdir():
        (tmp_path / item.name).write_bytes(item.read_bytes())
    data = (tmp_path / "model.safetensors").read_bytes()
    (tmp_path / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelError, match=r"cannot read .*model\.safetensors .*delete ") as error:
        load_model(str(tmp_path), "bfloat16")
    assert "\n" not in str(error.value)


def test_index_without_a_weight_map_is_refused(tmp_path):
    (tmp_path / weights.INDEX_FILE).write_text(json.dumps({"metadata": {}}))
    with pytest.raises(ModelError, match="no weight_map"):
        weights.safetensors_files(tmp_path)
    assert weights.safetensors_files(tmp_path / "missing") is None


PEAK = """
import json, resource, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM  # imported before the baseline
from specplan.models.load import load_model
folder = sys.argv[1]
AutoTokenizer.from_pretrained(folder)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
loaded = load_model(folder, "bfloat16")
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
held = sum(t.numel() * t.element_size() for t in loaded.model.parameters())  # a tied weight once
print(json.dumps({"grew": (after - before) * 1024, "held": held}))
"""


@pytest.mark.realmodel
def test_bfloat16_load_of_the_default_model_does_not_hold_the_float32_file(default_model_dir):
    """Peak resident memory of a fresh process loading the default model in bfloat16 grows by
    less than the float32 file (538 MB; transformers' memory-mapped load grew by the file plus
    the bfloat16 weights)."""
    result = subprocess.run([sys.executable, "-c", PEAK, default_model_dir], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    file_size = (Path(default_model_dir) / "model.safetensors").stat().st_size
    assert measured["held"] < 0.6 * file_size  # bfloat16: half the float32 file
    print(measured)
    assert measured["grew"] < 0.85 * file_size, measured


def test_a_quantized_checkpoint_is_left_to_transformers(tiny_model_dir, tmp_path):
    """A folder whose config names a quantization (GPTQ's packed integers) is not read tensor by tensor."""
    import shutil

    folder = tmp_path / "quantized"
    shutil.copytree(tiny_model_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128}
    (folder / "config.json").write_text(json.dumps(config))
    assert weights.load_causal_lm(folder, torch.bfloat16) is None
    assert weights.load_causal_lm(Path(tiny_model_dir), torch.bfloat16) is not None

"""The CUDA path: CUDA-event timing, lossless decoding on the GPU in eager and
compiled (``reduce-overhead``: CUDA graphs) steps, and a latency-only profile on the GPU.

Marked ``cuda``: skipped where torch sees no CUDA device (CI, this project's CPU machines);
``scripts/gpu-check.sh`` runs them with ``-m cuda`` on a GPU.
"""

from __future__ import annotations

import pytest
import torch

from specplan.core.plan import StageShape
from specplan.cli.main import main
from specplan.core.profile import load_profile
from specplan.core.runtime_modes import RuntimeMode
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.drafters.ngram import NgramDrafter
from specplan.runtime.drafters.ngram_tree import NgramTreeDrafter
from specplan.runtime.engine import SpeculativeEngine
from specplan.runtime.timing import time_ms
from tests.runtime.test_engine import PROMPTS
from tests.runtime.tiny_models import tiny_llama
from tests.profiler.test_latency_only import write_config

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (scripts/gpu-check.sh)")]
CUDA = torch.device("cuda")


def reference_greedy(model, prompt: list[int], new_tokens: int) -> list[int]:
    """Full recompute (no cache) and argmax on the GPU, one token at a time."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(new_tokens):
            ids.append(int(model(torch.tensor([ids], device=CUDA)).logits[0, -1].argmax()))
    return ids[len(prompt):]


def test_cuda_events_time_a_kernel():
    matrix = torch.randn(2048, 2048, device=CUDA)
    elapsed = time_ms(lambda: matrix @ matrix, CUDA)
    assert 0 < elapsed < 10_000


@pytest.mark.parametrize("runtime", ["eager", "static", "compiled"])
@pytest.mark.parametrize("tree", [False, True], ids=["sequence", "tree"])
def test_greedy_decoding_on_the_gpu_is_token_identical_to_plain(runtime, tree):
    target = tiny_llama("sdpa", seed=0).to(CUDA)
    shape = {"tree": StageShape("tree", budget=6, depth=3, dynamic=True)} if tree else {"gamma": 3}
    drafter = NgramTreeDrafter(2) if tree else NgramDrafter(2)
    engine = SpeculativeEngine(target, CUDA, set(), drafter, runtime=RuntimeMode(runtime), **shape)
    for prompt in PROMPTS:
        result = engine.generate(prompt, 24, SamplingConfig())
        assert list(result.token_ids) == reference_greedy(target, prompt, 24)


def test_a_latency_only_profile_on_the_gpu_in_compiled_mode(tmp_path):
    output = tmp_path / "profile.yaml"
    code = main(["profile", "--latency-only", "--arch", str(write_config(tmp_path)), "--device", "cuda",
                 "--runtime", "compiled", "--quick", "-o", str(output)])
    assert code == 0
    profile = load_profile(output)
    assert profile.device.kind == "cuda" and profile.target.mode == "compiled"
    assert all(ms > 0 for ms in profile.target.latency[0].ms)


def test_batched_curves_on_the_gpu_run_through_the_compiled_step():
    """With a compiled runtime the T(n, b) forwards replay CUDA graphs of the runtime's own step
    (profiler/batch_latency.py): they run, every width of every batch is timed, and the step's
    graphs were built (its compiled function was called)."""
    from specplan.profiler.batch_latency import batch_step, measure_batch_curves
    from specplan.runtime.compile.compiled import compiled_step

    model = tiny_llama("sdpa", seed=0).to(CUDA)
    assert batch_step(model, CUDA, RuntimeMode("compiled")) is compiled_step(model, CUDA).function
    curves = measure_batch_curves(model, CUDA, list(range(2, 34)), (1, 2, 4), 2, runtime=RuntimeMode("compiled"))
    assert [curve.batch for curve in curves] == [2, 4]
    assert all(len(curve.ms) == len(curve.n) and all(ms > 0 for ms in curve.ms) for curve in curves)

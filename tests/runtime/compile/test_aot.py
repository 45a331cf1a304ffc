"""Ahead-of-time packages (runtime ``compiled``): built once per key, loaded by later sessions,
refused and rebuilt when stale, token-identical to eager in float32 (tiny random Llamas).

One real build per module (about half a minute on 2 cores); the rebuild decisions are checked
with a build that restores the real package and counts its calls.
"""

from __future__ import annotations

import dataclasses
import shutil

import pytest
import torch

from specplan.core.plan import StageShape
from specplan.core.runtime_modes import RuntimeMode
from specplan.runtime.compile import aot_store, model_steps
from specplan.runtime.compile.aot_step import AotStep
from specplan.runtime.compile.compiled import CompiledStep
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.drafters.ngram import NgramDrafter
from specplan.runtime.drafters.recycle import RecycleDrafter
from specplan.runtime.engine import SpeculativeEngine
from specplan.runtime.session import ModelSession
from tests.runtime.test_engine import PROMPTS, reference_greedy
from tests.runtime.compile.test_static_cache import assert_same_logits, script
from tests.runtime.tiny_models import tiny_llama

CPU = torch.device("cpu")
COMPILED = RuntimeMode("compiled")

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def cache_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("specplan-cache")
    patch = pytest.MonkeyPatch()
    patch.setenv("SPECPLAN_CACHE", str(root))
    yield root
    patch.undo()


@pytest.fixture(scope="module")
def target(cache_root):
    """A tiny model with its package built (the one real build of the module)."""
    model = tiny_llama("sdpa", seed=0)
    step = model_steps.model_step(model, CPU, COMPILED)
    assert isinstance(step, AotStep)
    return model


def test_a_session_runs_the_package_and_gives_the_dynamic_logits(target):
    reference = script(ModelSession(target, CPU, cache="dynamic"))
    session = ModelSession(target, CPU, runtime=COMPILED)
    assert isinstance(session.step, AotStep) and session.compile_seconds == 0.0
    before = session.step.calls
    assert_same_logits(reference, script(session))
    assert session.step.calls - before == 5  # every forward but the first (it allocates the buffers)


@pytest.mark.parametrize("shape", [None, StageShape("tree", parents=(-1, 0, 0, 0, 1, 1, 2, 4, 4, 7))], ids=["sequence", "tree"])
def test_the_package_engine_is_token_identical_to_plain_greedy(target, shape):
    drafter = RecycleDrafter() if shape else NgramDrafter(3)
    engine = SpeculativeEngine(target, CPU, eos_ids=set(), drafter=drafter, gamma=0 if shape else 4, tree=shape,
                               runtime=COMPILED)
    assert isinstance(engine.target.step, AotStep)
    for prompt in PROMPTS:
        assert list(engine.generate(prompt, 24, SamplingConfig()).token_ids) == reference_greedy(target, prompt, 24)


def test_a_second_model_of_the_same_architecture_loads_the_package_with_its_own_weights(target, monkeypatch):
    """Weights are read from the live model: no build, and the other model's own logits."""
    monkeypatch.setattr(aot_store, "build_package", _refuse_build)
    other = tiny_llama("sdpa", seed=1)
    assert aot_store.package_key(other, CPU) == aot_store.package_key(target, CPU)
    reference = script(ModelSession(other, CPU, cache="dynamic"))
    assert_same_logits(reference, script(ModelSession(other, CPU, runtime=COMPILED)))


def _refuse_build(*args, **kwargs):
    raise AssertionError("a valid package was rebuilt")


def test_the_key_separates_dtype_architecture_and_versions(target):
    key = aot_store.package_key(target, CPU)
    wider = tiny_llama("sdpa", seed=0)
    wider.config.intermediate_size = 128
    assert aot_store.package_key(wider, CPU).config_sha256 != key.config_sha256
    half = tiny_llama("sdpa", seed=0).to(torch.bfloat16)
    assert aot_store.package_key(half, CPU).dtype == "bfloat16" != key.dtype
    assert len({key.digest, dataclasses.replace(key, torch="0.0").digest, aot_store.package_key(half, CPU).digest}) == 3


@pytest.mark.parametrize("change", ["torch", "dtype", "step_version", "digest", "constants", "missing"])
def test_a_stale_package_is_refused_and_rebuilt(target, change, tmp_path, monkeypatch):
    key = aot_store.package_key(target, CPU)
    folder = aot_store.package_folder(key)
    assert aot_store.stale_reason(folder, key, target) is None
    saved = tmp_path / "saved"
    shutil.copytree(folder, saved)
    _make_stale(folder, change)
    reason = aot_store.stale_reason(folder, key, target)
    assert reason is not None and (change in ("digest", "constants", "missing") or change in reason)
    builds = []

    def restore(model, device, built_key, built_folder):  # a rebuild, without the half minute
        builds.append(built_key)
        shutil.rmtree(built_folder)
        shutil.copytree(saved, built_folder)
        return 0.0

    monkeypatch.setattr(aot_store, "build_package", restore)
    step = model_steps.ahead_of_time_step(target, CPU)
    assert builds == [key] and isinstance(step, AotStep)
    assert aot_store.stale_reason(folder, key, target) is None


def _make_stale(folder, change: str) -> None:
    meta_path = folder / aot_store.META_FILE
    meta = aot_store.safe_load_text(meta_path.read_text())
    if change in ("torch", "dtype", "step_version"):
        meta["key"][change] = "other"
    elif change == "digest":
        (folder / aot_store.PACKAGE_FILE).write_bytes(b"not a package")
    elif change == "constants":
        meta["constants"]["model.lm_head.weight"][0] += 1
    elif change == "missing":
        meta_path.unlink()
        return
    aot_store.write_document(meta_path, meta)


def test_a_step_that_cannot_be_exported_falls_back_to_jit_compiled_up_front(monkeypatch, capsys, cache_root):
    model = tiny_llama("sdpa", seed=2)
    model.config.intermediate_size = 96  # another key: nothing cached for it

    def fail(*args, **kwargs):
        raise RuntimeError("unsupported operator\nmore detail")

    compiled_widths = []
    monkeypatch.setattr(aot_store, "export_step", fail)
    monkeypatch.setattr(model_steps, "compile_every_width", lambda step, *rest: compiled_widths.append(step))
    step = model_steps.model_step(model, CPU, COMPILED)
    assert isinstance(step, CompiledStep) and compiled_widths == [step]
    message = capsys.readouterr().err.strip().splitlines()[-1]
    assert "cannot compile LlamaForCausalLM" in message and "unsupported operator" in message
    assert "more detail" not in message and "jit" in message


def test_a_cache_that_cannot_hold_a_package_falls_back_to_jit(monkeypatch, capsys, tmp_path):
    not_a_folder = tmp_path / "cache"
    not_a_folder.write_text("a file where the cache folder should be")
    monkeypatch.setenv("SPECPLAN_CACHE", str(not_a_folder))
    model = tiny_llama("sdpa", seed=2)
    compiled_widths = []
    monkeypatch.setattr(model_steps, "compile_every_width", lambda step, *rest: compiled_widths.append(step))
    step = model_steps.model_step(model, CPU, COMPILED)
    assert isinstance(step, CompiledStep) and compiled_widths == [step]
    message = capsys.readouterr().err.strip().splitlines()[-1]
    assert "cannot keep a compiled package" in message and "jit" in message


def test_jit_runtime_never_touches_packages(monkeypatch):
    monkeypatch.setattr(model_steps, "ahead_of_time_step", _refuse_build)
    model = tiny_llama("sdpa", seed=3)
    assert isinstance(model_steps.model_step(model, CPU, RuntimeMode("jit")), CompiledStep)

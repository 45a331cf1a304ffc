"""The profiler measures drafters against candidate middle models (hierarchy stages)."""

from __future__ import annotations

import pytest
import torch

from specplan.core.drafter_spec import parse_drafter_spec
from specplan.core.prompts import spec_bench_split, stratified


@pytest.mark.realmodel
def test_profile_measures_every_cheaper_drafter_against_each_middle_model(tiny_model_dir):
    from specplan.models.load import load_model
    from specplan.profiler.run import ProfileSettings, run_profile

    target = load_model(tiny_model_dir, "float32")
    specs = [parse_drafter_spec(spec) for spec in ("layerskip:2", "ngram:3", "recycle")]
    settings = ProfileSettings(max_new_tokens=16, repeats=1, gamma=4, rank_width=4)
    prompts = stratified(spec_bench_split("calibration"), 2)
    profile = run_profile(target, specs, prompts, torch.device("cpu"), settings)
    pairs = {(entry.drafter, entry.verifier) for entry in profile.acceptance}
    assert {("ngram-3", "layerskip-2"), ("recycle", "layerskip-2")} <= pairs
    assert ("layerskip-2", "layerskip-2") not in pairs
    middle = profile.acceptance_for("recycle", "layerskip-2", 0.0)
    assert len(middle.rank_accept) == 4 and middle.samples > 0

    settings = ProfileSettings(max_new_tokens=16, repeats=1, gamma=4, rank_width=4, middles=False)
    alone = run_profile(target, specs, prompts, torch.device("cpu"), settings)
    assert {entry.verifier for entry in alone.acceptance} == {"target"}


@pytest.mark.realmodel
def test_the_latency_curves_average_the_prompts_decode_position_thirds_unless_a_context_is_set(tiny_model_dir):
    from specplan.models.chat import encode_prompt
    from specplan.models.load import load_model
    from specplan.profiler.run import ANSWER_TOKENS, ProfileSettings, decode_contexts, run_profile

    target = load_model(tiny_model_dir, "float32")
    prompts = stratified(spec_bench_split("calibration"), 2)
    thirds = decode_contexts([len(encode_prompt(target.tokenizer, prompt.text)) for prompt in prompts], ANSWER_TOKENS)
    assert len(thirds) == 3 and thirds[0] < thirds[1] < thirds[2]
    for context, nominal, recorded in ((None, round(sum(thirds) / 3), list(thirds)), (40, 40, None)):
        settings = ProfileSettings(max_new_tokens=16, repeats=1, gamma=4, context=context, middles=False)
        profile = run_profile(target, [parse_drafter_spec("ngram:3")], prompts, torch.device("cpu"), settings)
        assert profile.calibration["context"] == nominal
        assert profile.calibration.get("contexts") == recorded
        assert {curve.context for curve in profile.target.latency} == {nominal}

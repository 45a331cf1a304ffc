"""profile -> plan -> run on the llama.cpp backend, on the default model's GGUF as it is,
and the rule that picks the backend (``--backend auto``)."""

from __future__ import annotations

import argparse
import json

import pytest
import yaml

from specplan.cli.main import main
from specplan.cli.profile import resolve_backend
from specplan.core.plan import load_plan
from specplan.core.profile import load_profile


def profile_args(**overrides) -> argparse.Namespace:
    values = {"backend": "auto", "target": None, "device": "cpu", "quant": None, "dtype": "auto", "drafter": None}
    values.update(overrides)
    return argparse.Namespace(**values)


@pytest.mark.parametrize("overrides, backend", [
    ({}, "llama.cpp"),                                               # the default GGUF on the CPU
    ({"drafter": ["ngram:3", "recycle"]}, "llama.cpp"),              # retrieval drafters run on either
    ({"drafter": ["layerskip:20"]}, "torch"),                        # reads the torch model's layers
    ({"quant": ["gptq"]}, "torch"),                                  # a 4-bit torch variant
    ({"dtype": "float32"}, "torch"),                                 # a float copy of the weights
    ({"device": "cuda"}, "torch"),
    ({"backend": "torch"}, "torch"),
])
def test_auto_picks_llama_cpp_for_a_gguf_target_on_the_cpu(overrides, backend):
    pytest.importorskip("llama_cpp")
    assert resolve_backend(profile_args(**overrides), (1,)) == backend


def test_a_model_directory_target_stays_on_torch(tiny_model_dir):
    assert resolve_backend(profile_args(target=tiny_model_dir), (1,)) == "torch"


@pytest.mark.parametrize("argv, fragment", [
    (["--quant", "gptq"], "does not take --quant"),
    (["--drafter", "layerskip:20"], "does not take layerskip"),
    (["--batch-sizes", "1,2"], "does not take --batch-sizes"),
    (["--threads", "0"], "--threads: 0 is out of range"),
])
def test_what_llama_cpp_cannot_honour_is_refused_in_one_line(argv, fragment, tmp_path, capsys):
    try:
        code = main(["profile", "--backend", "llama.cpp", *argv, "-o", str(tmp_path / "p.yaml")])
    except SystemExit as exit_:  # a usage error: argparse exits, as in a shell
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv, fragment", [
    (["--backend", "torch", "--numerics", "fast"], "pass it with --backend llama.cpp"),
    (["--engine", "llama.cpp", "--numerics", "exact"], "drop it with --engine"),
])
def test_numerics_outside_the_llama_cpp_backend_is_refused_in_one_line(argv, fragment, tmp_path, capsys):
    code = main(["profile", *argv, "-o", str(tmp_path / "p.yaml")])
    err = capsys.readouterr().err
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1


@pytest.mark.realmodel
# exact numerics (not the default) profile a second session for the floor: slow; its bit-identity is
# tested in CI by the session conformance tests
@pytest.mark.parametrize("numerics, threads", [pytest.param("exact", "1", marks=pytest.mark.slow), ("fast", "2")])
def test_profile_plan_and_run_on_llama_cpp(numerics, threads, tmp_path, capsys):
    pytest.importorskip("llama_cpp")
    profile_path = tmp_path / "profile.yaml"
    assert main(["profile", "--backend", "llama.cpp", "--numerics", numerics, "--threads", threads, "--quick",
                 "--limit", "2", "--drafter", "ngram:3", "-o", str(profile_path)]) == 0
    profile = load_profile(profile_path)
    assert profile.backend == "llama.cpp" and profile.device.source == "llama.cpp"
    assert profile.device.numerics == numerics and profile.exact == (numerics == "exact")
    (curve,) = profile.target.latency
    assert curve.n[:4] == (1, 2, 3, 4) and curve.n[-1] == 64 and all(ms > 0 for ms in curve.ms)
    if numerics == "fast":  # the session runs llama.cpp's own settings: its T(1) is the floor
        assert profile.target.engine_plain_ms == round(curve.ms[0], 4)
    else:  # timed on a second session at llama.cpp's own settings
        assert profile.target.engine_plain_ms > 0
    entry = profile.acceptance_for("ngram-3", "target", 0.0)
    assert entry is not None and entry.samples > 0
    plan_path = tmp_path / "plan-ngram.yaml"
    document = yaml.safe_load((tmp_path / "plan.yaml").read_text())
    document["stages"] = [{"drafter": "ngram-3", "verifier": "target", "shape": {"kind": "sequence", "gamma": 3}}]
    plan_path.write_text(yaml.safe_dump(document, sort_keys=False))  # a speculative stage, whatever was chosen
    capsys.readouterr()
    prompt = "Repeat this sentence twice: the cache keeps every committed token but the last."
    assert main(["run", str(plan_path), "--force", "--threads", threads, "--prompt", prompt, "--max-new-tokens", "40",
                 "--compare-plain", "--json"]) == 0
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert record["new_tokens"] > 0 and record["target_forwards"] < record["new_tokens"]  # drafts were accepted
    if numerics == "exact":  # verify forwards of fewer than 64 tokens give one-token decodes' logits bit for bit
        assert record["identical_to_plain"]
    else:
        assert record["identical_to_plain"] or record["divergence_gap"] < 0.5  # a named near-tie at worst
    assert load_plan(plan_path).stages[0].drafter == "ngram-3"

"""``specplan profile --engine llama.cpp``: llama.cpp's T(n) measured by llama-cpp-python on the
GGUF files llama-server would load, acceptance kept from the measured profile, drafters llama.cpp
cannot run left out; the plan and the llama.cpp export are then solved on those costs."""

from __future__ import annotations

import math

import pytest

from specplan.cli.main import main
from specplan.core.profile import (AcceptanceEntry, DeviceInfo, LatencyCurve, ModelEntry, Profile, RetrievalEntry,
                                   load_profile, save_profile)

pytestmark = [pytest.mark.realmodel, pytest.mark.filterwarnings("ignore::specplan.planner.PlannerWarning")]


def measured_profile(tmp_path, target: str, drafter_folder: str):
    models = (
        ModelEntry("target", target, "fp", role="target", latency=(LatencyCurve(32, (1, 4), (40.0, 44.0)),)),
        ModelEntry("model-tiny", f"model:{drafter_folder}", "fp", latency=(LatencyCurve(32, (1, 2), (2.0, 2.2)),)),
        ModelEntry("layerskip-20", "layerskip:20", "fp", base="target", latency=(LatencyCurve(32, (1,), (30.0,)),)),
    )
    acceptance = tuple(AcceptanceEntry(drafter, "target", 0.0, 0.6, 8, rank_accept=(0.6,))
                       for drafter in ("model-tiny", "layerskip-20", "ngram-3", "recycle"))
    retrieval = (RetrievalEntry("ngram-3", "ngram:3", 0.05), RetrievalEntry("recycle", "recycle", 0.05))
    profile = Profile(DeviceInfo("cpu", "test cpu", "cpu"), models, acceptance, retrieval)
    save_profile(profile, tmp_path / "measured.yaml")
    return tmp_path / "measured.yaml"


def test_llama_cpp_latency_replaces_the_runtime_s(tiny_model_dir, tmp_path, capsys):
    pytest.importorskip("llama_cpp")
    source = measured_profile(tmp_path, "default", tiny_model_dir)
    out = tmp_path / "engine" / "profile.yaml"
    assert main(["profile", "--engine", "llama.cpp", "--acceptance-from", str(source), "-o", str(out), "--quick",
                 "--threads", "1"]) == 0
    printed = capsys.readouterr().out
    profile = load_profile(out)
    assert profile.device.source == "engine:llama.cpp" and "llama-cpp-python" in profile.device.name
    assert profile.engine == "llama.cpp" and profile.backend == "torch"  # llama-server's costs, not the backend's
    assert [model.id for model in profile.models] == ["target", "model-tiny"]
    assert [entry.id for entry in profile.retrieval] == ["ngram-3"]
    assert {entry.drafter for entry in profile.acceptance} == {"model-tiny", "ngram-3"}
    for model, n in (("target", (1, 4)), ("model-tiny", (1, 2))):
        (curve,) = profile.model(model).latency
        assert curve.source == "llama.cpp" and curve.n == n and curve.context == 32
        assert all(math.isfinite(ms) and ms > 0 for ms in curve.ms)
    assert profile.model("target").latency[0].ms != (40.0, 44.0)
    assert "layerskip-20" in printed and "recycle" in printed  # left out, said
    assert (tmp_path / "engine" / "llama.cpp-drafters").is_dir()  # the drafter measured as GGUF
    assert main(["export", str(tmp_path / "engine" / "plan.yaml"), "--engine", "llama.cpp"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("llama-server -m ") and "llama.cpp's own T(n)" in captured.err
    # its plans are llama-server's: `run` says so in one line instead of loading the target
    assert main(["run", str(tmp_path / "engine" / "plan.yaml"), "--prompt", "hi", "--max-new-tokens", "2"]) == 2
    error = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(error) == 1 and "specplan export --engine llama.cpp" in error[0]


def test_a_target_without_gguf_and_a_missing_source_are_one_line_errors(tiny_model_dir, tmp_path, capsys):
    source = measured_profile(tmp_path, tiny_model_dir, tiny_model_dir)
    assert main(["profile", "--engine", "llama.cpp", "--acceptance-from", str(source), "-o",
                 str(tmp_path / "p.yaml")]) == 2
    assert main(["profile", "--engine", "llama.cpp", "-o", str(tmp_path / "p.yaml")]) == 2
    assert main(["profile", "--engine", "llama.cpp", "--acceptance-from", str(source), "-o", str(source)]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    import importlib.util

    first = "GGUF" if importlib.util.find_spec("llama_cpp") else "pip install llama-cpp-python"  # CI has no llama.cpp
    assert len(errors) == 3 and first in errors[0] and "--acceptance-from" in errors[1]

"""llama.cpp as a bench peer: one line and exit 2 without llama-cpp-python; the engine's outputs
reported, not required, in the lossless check; and, where the package is installed, both peers
run for real on the default model's GGUF (token agreement with transformers printed, not asserted:
llama.cpp computes in the GGUF's own quantized kernels)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from specplan.bench.llamacpp_peer import LLAMA_CPP_PEERS, build_llamacpp_peers
from specplan.bench.markdown import _lossless
from specplan.bench.metrics import Measurement, Row
from specplan.bench.report import BenchReport
from specplan.cli.main import main
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.lossless import LosslessCheck, first_divergence

PLAN = Path(__file__).resolve().parents[2] / "profiles" / "cpu" / "plan.yaml"


def test_missing_llama_cpp_is_one_line_exit_2(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import llama_cpp now raises ImportError
    code = main(["bench", str(PLAN), "--baselines", "plain,llama.cpp-lookup", "--limit", "1", "--max-new-tokens", "4"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and "llama-cpp-python" in err and "specplan[llamacpp]" in err


def test_engine_outputs_are_reported_not_required():
    def row(method: str, tokens: tuple[int, ...], check: LosslessCheck) -> Row:
        return Row("1", "writing", method, Measurement(tokens, 1.0, len(tokens), 0.5), check, 1.0)

    methods = [{"name": "plain", "kind": "plain"}, {"name": "llama.cpp", "kind": "engine"},
               {"name": "hf-lookup", "kind": "peer"}]
    rows = [row("plain", (1, 2, 3), LosslessCheck(True)), row("llama.cpp", (1, 5, 3), LosslessCheck(False, 1, 2.0)),
            row("hf-lookup", (1, 2, 4), LosslessCheck(False, 2, 2.0))]
    report = BenchReport({"dtype": "float32"}, methods, "plain", rows)
    lossless = report.lossless()
    assert lossless["llama.cpp"]["ok"] is False and lossless["llama.cpp"]["required"] is False
    assert lossless["hf-lookup"]["required"] is True
    lines = _lossless(report)
    assert "- llama.cpp: reported, not required (another engine's own kernels), 0/1 identical, 0 near-tie divergence(s)" \
        in "\n".join(lines)
    assert any(line.startswith("- hf-lookup: **FAIL**") for line in lines)


def test_a_divergence_past_a_near_tie_is_listed_first_with_its_verify_width():
    """Eight near-ties, then one divergence at a gap of 0.6 that a verify of 16 tokens decodes, and one that no
    width decodes: the verdict fails either way, and the report lists both first, each with what the widths say."""
    def row(prompt: str, check: LosslessCheck) -> Row:
        return Row(prompt, "edit", "plan", Measurement((1, 2), 1.0, 2, 0.5), check, 1.0)

    ties = [row(str(index), LosslessCheck(False, 5, 0.1)) for index in range(8)]
    rows = ties + [row("46", LosslessCheck(False, 72, 0.6, flip_width=16)), row("47", LosslessCheck(False, 9, 0.9, flip_width=0))]
    plain = [Row(r.prompt_id, "edit", "plain", Measurement((1, 2), 1.0, 2, 0.5), LosslessCheck(True), 1.0) for r in rows]
    report = BenchReport({"dtype": "gguf"}, [{"name": "plain", "kind": "plain"}, {"name": "plan", "kind": "plan"}],
                         "plain", plain + rows)
    assert report.lossless()["plan"]["ok"] is False
    lines = [line for line in _lossless(report) if line.startswith("  - prompt")]
    assert lines[0] == ("  - prompt 46: first differs at token 72, top-2 gap 0.600; a verify of 16 token(s) ending there "
                        "decodes the output's token (the backend's arithmetic at that width)")
    assert lines[1].startswith("  - prompt 47:") and "no verify width up to 64 decodes" in lines[1]
    assert len(lines) == 8 and lines[2].endswith("top-2 gap 0.100")


def test_the_bench_looks_for_a_verify_width_only_past_a_near_tie_on_a_session():
    """bench/run.py ``with_flip_width``: a divergence past a near-tie read on a session gets the narrowest width
    that decodes the output's token (1 for the target's own greedy token); a near-tie, an identical output, a
    torch module's check and an output that ends where the reference goes on are left as they were."""
    from specplan.bench.run import with_flip_width
    from specplan.runtime.session import ModelSession
    from tests.runtime.tiny_models import tiny_llama

    model = tiny_llama()
    session = ModelSession(model, torch.device("cpu"))
    prompt, reference = list(range(3, 23)), list(range(40, 50))
    greedy = int(session.extend(prompt + reference[:4])[-1].argmax())
    session.reset()
    output = reference[:4] + [greedy]
    past = LosslessCheck(False, 4, 0.6)
    assert with_flip_width(past, session, prompt, reference, output).flip_width == 1
    for check in (LosslessCheck(False, 4, 0.2), LosslessCheck(True)):
        assert with_flip_width(check, session, prompt, reference, output) == check
    assert with_flip_width(past, model, prompt, reference, output).flip_width is None
    assert with_flip_width(past, session, prompt, reference, output[:4]).flip_width is None


def test_a_target_that_is_not_a_gguf_leaves_the_peers_out():
    pytest.importorskip("llama_cpp")
    runner = SimpleNamespace(profile=SimpleNamespace(target=SimpleNamespace(source="some/model-directory")))
    notes: list[str] = []
    assert build_llamacpp_peers(LLAMA_CPP_PEERS, runner, SamplingConfig(), (2, 4, "test"), 64, notes) == []
    assert len(notes) == 1 and "not a GGUF file" in notes[0]


@pytest.mark.realmodel
def test_llama_cpp_peers_run_on_the_default_gguf(default_model_dir):
    pytest.importorskip("llama_cpp")
    from specplan.models.chat import encode_prompt
    from specplan.models.load import load_model

    target = load_model("default", "float32")
    runner = SimpleNamespace(profile=SimpleNamespace(target=SimpleNamespace(source="default")), target=target)
    prompt_ids = encode_prompt(target.tokenizer, "Repeat exactly: the cat sat on the mat, the cat sat on the mat.")
    tokens, notes = 8, []
    methods = build_llamacpp_peers(LLAMA_CPP_PEERS, runner, SamplingConfig(), (2, 4, "test"), len(prompt_ids) + tokens, notes)
    assert [method.name for method in methods] == list(LLAMA_CPP_PEERS) and notes == []
    with torch.inference_mode():
        output = target.model.generate(torch.tensor([prompt_ids]), max_new_tokens=tokens, do_sample=False)
    reference = output[0, len(prompt_ids):].tolist()
    for method in methods:
        first, again = method.run(prompt_ids, tokens), method.run(prompt_ids, tokens)
        assert again.token_ids == first.token_ids  # greedy, and nothing kept from the call before
        assert 1 <= first.new_tokens <= tokens and first.seconds > 0 and first.prefill_seconds > 0
        assert 1 <= first.target_forwards <= first.new_tokens and 0 < first.forward_seconds <= first.seconds
        assert (first.draft_seconds is not None) == (method.name == "llama.cpp-lookup")
        if method.name == "llama.cpp":
            assert first.target_forwards == first.new_tokens  # one token per forward
        index = first_divergence(reference, list(first.token_ids))
        print(f"{method.name}: {first.token_ids} vs transformers {reference}: first differs at {index}")


def test_the_lookup_peer_takes_a_prompt_longer_than_n_batch(default_model_dir):
    """llama-cpp-python sizes its logits buffer by the logits_all argument: the lookup peer asks for
    it, so a prompt past n_batch (512) fits (Spec-Bench's evaluation split has one of 769 tokens)."""
    pytest.importorskip("llama_cpp")
    from specplan.models.load import load_model

    target = load_model("default", "float32")
    runner = SimpleNamespace(profile=SimpleNamespace(target=SimpleNamespace(source="default")), target=target)
    prompt_ids = [(11 * index + 7) % 40000 + 100 for index in range(600)]
    methods = build_llamacpp_peers(("llama.cpp-lookup",), runner, SamplingConfig(), (2, 4, "test"), 600 + 4, [])
    assert 1 <= methods[0].run(prompt_ids, 4).new_tokens <= 4

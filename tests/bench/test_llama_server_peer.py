"""llama-server as a bench peer: baseline names, the server's command line and request, a response as a
Measurement, the notes when the binary or a drafter is missing (pure, fast); and, where
scripts/build-llama-server.sh has built the binary, the real server's plain greedy output on the
default GGUF against the llama.cpp backend's own plain decoding (slow)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from specplan.bench.metrics import Measurement

from specplan.runtime.llama_cpp_session import engine_repacks
from specplan.bench.llama_server_peer import (
    ServerPeer,
    completion_request,
    drafter_gguf,
    is_llama_server_name,
    llama_server_peers,
    measurement,
    parse_peer,
    server_binary,
    server_command,
)
from specplan.core.errors import SpecplanError


@pytest.mark.parametrize("name, spec_type, n_max", [
    ("llama-server", None, None),
    ("llama-server-draft", "draft-simple", None),
    ("llama-server-draft:3", "draft-simple", 3),
    ("llama-server-ngram", "ngram-simple", None),
    ("llama-server-ngram-simple", "ngram-simple", None),
    ("llama-server-ngram-map-k", "ngram-map-k", None),
    ("llama-server-ngram-map-k4v", "ngram-map-k4v", None),
    ("llama-server-ngram-mod", "ngram-mod", None),
    ("llama-server-ngram-cache", "ngram-cache", None),
])
def test_names(name, spec_type, n_max):
    assert is_llama_server_name(name)
    assert parse_peer(name) == ServerPeer(name, spec_type, n_max)


@pytest.mark.parametrize("name", ["llama-server-eagle", "llama-server-ngram:4", "llama-server-draft:0",
                                  "llama-server-draft:x", "llama-server-"])
def test_bad_names_are_one_line_errors(name):
    with pytest.raises(SpecplanError) as error:
        parse_peer(name)
    assert "\n" not in str(error.value) and name in str(error.value)


def test_other_baselines_are_not_server_names():
    assert not any(map(is_llama_server_name, ("plain", "llama.cpp", "llama.cpp-lookup", "grid", "llama-serverx")))


def test_the_cli_accepts_server_names_and_rejects_a_bad_one():
    from specplan.cli.bench import _baselines

    assert _baselines("plain,llama-server,llama-server-draft:2") == ("plain", "llama-server", "llama-server-draft:2")
    with pytest.raises(SpecplanError, match="llama-server-nope"):
        _baselines("plain,llama-server-nope")


def test_command_lines():
    plain = server_command("/bin/ls", parse_peer("llama-server"), "t.gguf", 2, 8123)
    assert plain[:9] == ["/bin/ls", "-m", "t.gguf", "-t", "2", "-c", "4096", "-np", "1"]
    assert plain[plain.index("--port") + 1] == "8123" and plain[plain.index("--host") + 1] == "127.0.0.1"
    assert "--no-repack" in plain  # exact numerics, or AMX, whose repacking crashes llama.cpp's decodes
    assert "--no-repack" not in server_command("s", parse_peer("llama-server"), "t.gguf", 2, 1, repack=True)
    assert plain[-2:] == ["--spec-type", "none"] and "--spec-draft-model" not in plain
    draft = server_command("s", parse_peer("llama-server-draft:4"), "t.gguf", 1, 1, draft="d.gguf")
    assert draft[draft.index("--spec-draft-model") + 1] == "d.gguf"
    assert draft[draft.index("--spec-draft-n-max") + 1] == "4" and draft[-2:] == ["--spec-type", "draft-simple"]
    defaults = server_command("s", parse_peer("llama-server-draft"), "t.gguf", 1, 1, draft="d.gguf")
    assert "--spec-draft-n-max" not in defaults
    ngram = server_command("s", parse_peer("llama-server-ngram-map-k"), "t.gguf", 1, 1)
    assert ngram[-2:] == ["--spec-type", "ngram-map-k"] and "--spec-draft-model" not in ngram
    with pytest.raises(SpecplanError):
        server_command("s", parse_peer("llama-server-draft"), "t.gguf", 1, 1)


def test_request_is_greedy_without_prompt_cache():
    body = completion_request([1, 2, 3], 16)
    assert body["prompt"] == [1, 2, 3] and body["n_predict"] == 16
    assert body["temperature"] == 0 and body["top_k"] == 1 and body["samplers"] == ["top_k"]
    assert body["cache_prompt"] is False and body["return_tokens"] is True


def test_a_response_as_a_measurement():
    response = {"tokens": [5, 6, 7, 8, 2], "timings": {"prompt_n": 10, "prompt_ms": 100.0, "predicted_n": 5,
                                                       "predicted_ms": 150.0, "predicted_per_second": 33.3,
                                                       "draft_n": 4, "draft_n_accepted": 3}}
    result = measurement(response, 16)
    assert result.token_ids == (5, 6, 7, 8, 2) and result.seconds == pytest.approx(0.25)
    assert result.prefill_seconds == pytest.approx(0.1) and result.target_forwards == 2
    assert measurement(response, 3).token_ids == (5, 6, 7)
    plain = measurement({"tokens": [1, 2], "timings": {"prompt_ms": 1.0, "predicted_ms": 1.0}}, 4)
    assert plain.target_forwards == 2


def test_the_servers_decode_rate_leaves_out_the_token_its_prompt_batch_gave():
    """llama-server's first token comes from the prompt batch (its n_gen_steps is n - 1), where the
    runtime's comes from its first round: decode rates count the decode steps' tokens only."""
    response = {"tokens": [5, 6, 7, 8, 2], "timings": {"prompt_ms": 100.0, "predicted_ms": 200.0}}
    server = measurement(response, 16)
    assert server.prefill_tokens == 1 and server.decode_tokens_per_s == pytest.approx(4 / 0.2)
    runtime = Measurement(token_ids=(5, 6, 7, 8, 2), seconds=0.3, target_forwards=5, forward_seconds=0.3,
                          prefill_seconds=0.1)
    assert runtime.decode_tokens_per_s == pytest.approx(5 / 0.2)


def test_missing_binary_is_a_note(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECPLAN_LLAMA_SERVER", str(tmp_path / "missing"))
    notes: list[str] = []
    runner = SimpleNamespace(target=SimpleNamespace(path="t.gguf"))
    assert llama_server_peers(["plain", "llama-server", "llama-server-ngram"], runner, 1, None, notes) == []
    assert len(notes) == 1 and "build-llama-server.sh" in notes[0] and "llama-server-ngram" in notes[0]
    assert llama_server_peers(["plain", "grid"], runner, 1, None, notes) == [] and len(notes) == 1


def test_a_draft_peer_without_a_drafter_is_a_note(monkeypatch, tmp_path):
    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    monkeypatch.setenv("SPECPLAN_LLAMA_SERVER", str(binary))
    assert server_binary() == binary
    notes: list[str] = []
    runner = SimpleNamespace(target=SimpleNamespace(path=str(tmp_path / "t.gguf"), exact=True))
    methods = llama_server_peers(["llama-server", "llama-server-draft:2"], runner, 2, None, notes)
    assert [m.name for m in methods] == ["llama-server"] and methods[0].kind == "engine"
    assert len(notes) == 1 and notes[0].startswith("llama-server-draft:2 left out")
    assert methods[0].settings == {"spec_type": "none", "threads": 2, "n_ctx": 4096}  # no server started yet
    methods = llama_server_peers(["llama-server-draft:2"], runner, 2, tmp_path / "d.gguf", notes)
    assert methods[0].settings["spec_draft_n_max"] == 2 and "d.gguf" in methods[0].description
    assert "--no-repack" in methods[0].description  # exact numerics: weights as the session loads them
    if engine_repacks(False):  # fast numerics repack, as llama-server does by default (not on AMX)
        fast = SimpleNamespace(target=SimpleNamespace(path=str(tmp_path / "t.gguf"), exact=False))
        assert "--no-repack" not in llama_server_peers(["llama-server"], fast, 2, None, notes)[0].description


def test_drafter_gguf_prefers_the_plans_drafter(tmp_path):
    first, second = tmp_path / "a.gguf", tmp_path / "b.gguf"
    first.write_bytes(b""), second.write_bytes(b"")
    model = lambda id, source, role="drafter": SimpleNamespace(id=id, source=source, role=role)  # noqa: E731
    profile = SimpleNamespace(models=[model("target", "default", "target"), model("ngram", "ngram:3"),
                                      model("a", f"model:{first}"), model("b", f"model:{second}")])
    assert drafter_gguf(profile) == first
    assert drafter_gguf(profile, [SimpleNamespace(drafter="b")]) == second
    assert drafter_gguf(SimpleNamespace(models=[model("dir", "model:some/folder")])) is None


@pytest.mark.slow
def test_plain_server_decodes_as_the_llama_cpp_backend():
    """llama-server's plain greedy decoding of the default GGUF (1 thread) against the backend's own:
    token-identical, or parting at a near-tie of the backend's logits."""
    if not server_binary().is_file():
        pytest.skip(f"no llama-server at {server_binary()}: bash scripts/build-llama-server.sh")
    pytest.importorskip("llama_cpp")
    from specplan.models.load import default_gguf_path
    from specplan.runtime.drafters.base import SamplingConfig
    from specplan.runtime.engine import SpeculativeEngine
    from specplan.runtime.llama_cpp_session import LlamaCppSession
    from specplan.runtime.lossless import NEAR_TIE, divergence_gap, first_divergence

    gguf = default_gguf_path()
    tokens = 16
    with LlamaCppSession(gguf, n_ctx=1024, threads=1, max_tree_paths=8) as session:
        text = "<|im_start|>user\nList three facts about the moon.<|im_end|>\n<|im_start|>assistant\n"
        prompt_ids = session.tokenize(text, add_special=False)
        engine = SpeculativeEngine(session, session.device, set(session.eos_ids))
        reference = list(engine.generate(prompt_ids, tokens, SamplingConfig()).token_ids)
        (method,) = llama_server_peers(["llama-server"], SimpleNamespace(target=SimpleNamespace(path=str(gguf), exact=True)),
                                       1, None, notes := [])
        try:
            first = method.run(prompt_ids, tokens)
            again = method.run(prompt_ids, tokens)
        finally:
            method.close()
        assert method.server.process is None and notes == []
        assert again.token_ids == first.token_ids  # greedy, and nothing cached from the call before
        assert 1 <= first.new_tokens <= tokens and first.seconds > 0 and 0 < first.prefill_seconds < first.seconds
        settings = method.settings
        assert settings["calls"] == 2 and settings["decode_tokens_per_s"] > 0 and "draft_n" not in settings
        index = first_divergence(reference, list(first.token_ids))
        if index is not None:
            gap = divergence_gap(session, prompt_ids, reference, index)
            assert gap < NEAR_TIE, (f"llama-server parts from the backend at {index} ({first.token_ids} vs "
                                    f"{tuple(reference)}), top-2 gap {gap:.3f} >= {NEAR_TIE}")

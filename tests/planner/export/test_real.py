"""The exported settings run for real where the engine is installed here: transformers 5.23 runs
the exported snippet, llama-cpp-python runs the exported n-gram numbers, each for a few tokens
on the default model (SmolLM2-135M)."""

from __future__ import annotations

import contextlib
import io
import shlex

import pytest

from specplan.core.profile import AcceptanceEntry, DeviceInfo, LatencyCurve, ModelEntry, Profile, RetrievalEntry
from specplan.planner.export import export_plan
from specplan.planner.export.models import ModelNames

pytestmark = [pytest.mark.realmodel, pytest.mark.filterwarnings("ignore::specplan.planner.PlannerWarning")]


def flat(base: float) -> LatencyCurve:
    return LatencyCurve(256, (1, 2, 4, 8, 16), (base,) * 5)


def profile_for(drafter: str, source: str) -> Profile:
    """A profile where ``drafter`` pays off on the default target (the numbers are made up)."""
    models = [ModelEntry("target", "default", "fp", dtype="float32", role="target", latency=(flat(40.0),))]
    retrieval = ()
    if source.startswith("ngram:"):
        retrieval = (RetrievalEntry(drafter, source, 0.02),)
    else:
        models.append(ModelEntry(drafter, source, "fp", dtype="float32", latency=(flat(4.0),),
                                 base="target" if source.startswith("layerskip:") else None))
    acceptance = (AcceptanceEntry(drafter, "target", 0.0, 0.7, 8, rank_accept=(0.7,)),)
    return Profile(DeviceInfo("cpu", "test cpu", "cpu"), tuple(models), acceptance, retrieval)


@pytest.fixture(scope="module")
def local_default():
    from specplan.models.load import resolve_model_dir

    return resolve_model_dir("default")


@pytest.mark.parametrize("drafter, source", [("ngram-3", "ngram:3"), ("layerskip-20", "layerskip:20"),
                                             ("model-default", "model:default")])
def test_the_transformers_snippet_runs(drafter, source, local_default):
    names = ModelNames("default", "cpu", overrides=(("default", local_default),))
    result = export_plan(profile_for(drafter, source), "transformers", names=names)
    assert result.stage is not None and result.stage.drafter == drafter
    snippet = result.config.replace("max_new_tokens = 64", "max_new_tokens = 8")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(snippet, "<exported snippet>", "exec"), {})
    assert printed.getvalue().strip()


def test_llama_cpp_python_runs_the_exported_ngram_numbers():
    """llama-cpp-python has no llama-server; its prompt-lookup drafter takes the same two numbers
    (the n-gram size and the draft length) that the exported --spec-ngram-simple flags carry."""
    llama_cpp = pytest.importorskip("llama_cpp")
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    from specplan.models.load import gguf_file

    names = ModelNames("default", "cpu", (("default", str(gguf_file("default"))),))
    result = export_plan(profile_for("ngram-3", "ngram:3"), "llama.cpp", names=names)
    words = shlex.split(result.config)
    flags = dict(zip(words[1::2], words[2::2]))
    drafter = LlamaPromptLookupDecoding(max_ngram_size=int(flags["--spec-ngram-simple-size-n"]),
                                        num_pred_tokens=int(flags["--spec-ngram-simple-size-m"]))
    from specplan.runtime.llama_cpp_session import high_level_llama  # repacking off on an AMX CPU (docs/backends.md)

    llm = high_level_llama(model_path=flags["-m"], n_ctx=512, n_threads=1, draft_model=drafter, verbose=False)
    output = llm("Write a haiku about caches.", max_tokens=8, temperature=0.0)
    assert output["choices"][0]["text"]

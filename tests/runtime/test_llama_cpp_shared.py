"""Several requests in one llama.cpp context (runtime/llama_cpp_shared.py): the batcher decodes the
waiting requests' extends together, and a slot session keeps the session contract beside other
slots' cells, its outputs those of a session of its own (or near-ties: batched rows round
differently, docs/backends.md)."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from specplan.core.errors import SpecplanError
from specplan.runtime.batcher import Batcher
from specplan.runtime.llama_cpp_shared import Submission

# ---- the batcher, on a stand-in context --------------------------------------------------------


class Recorder:
    """A shared context that records which submissions each decode carried."""

    def __init__(self):
        self.decodes: list[list[list[int]]] = []

    def decode_together(self, submissions):
        self.decodes.append([submission.tokens for submission in submissions])


def submit_in_request(batcher, context, tokens, entered=None, leave_after=0.0):
    """A request's thread: enter, submit ``tokens``, stay ``leave_after`` s, leave."""
    with batcher.request():
        if entered is not None:
            entered.wait()
        batcher.submit(context, Submission(tokens, [0] * len(tokens), [[0]] * len(tokens), None))
        time.sleep(leave_after)


def test_the_waiting_requests_decode_together():
    batcher, context = Batcher(), Recorder()
    go = threading.Event()
    threads = [threading.Thread(target=submit_in_request, args=(batcher, context, [index], go)) for index in (1, 2)]
    for thread in threads:
        thread.start()
    while batcher.active < 2:
        time.sleep(0.001)
    go.set()
    assert batcher.step(5.0)
    for thread in threads:
        thread.join(5.0)
    assert sorted(context.decodes[0]) == [[1], [2]] and len(context.decodes) == 1
    assert batcher.steps == 1 and batcher.extends == 2


def test_requests_stay_together_round_after_round():
    batcher, context = Batcher(), Recorder()
    rounds = 200

    def request(token):
        with batcher.request():
            for _ in range(rounds):
                batcher.submit(context, Submission([token], [0], [[0]], None))

    threads = [threading.Thread(target=request, args=(token,)) for token in (1, 2)]
    for thread in threads:
        thread.start()
    while batcher.active < 2 and any(thread.is_alive() for thread in threads):
        time.sleep(0.0001)
    while any(thread.is_alive() for thread in threads):
        batcher.step(0.05)
    # a thread woken by a step counts as running before it wakes: no step goes without it
    together = sum(len(decode) == 2 for decode in context.decodes)
    assert together >= rounds - 1 and len(context.decodes) <= rounds + 1


def test_a_request_still_drafting_is_waited_for_and_one_that_left_is_not():
    batcher, context = Batcher(), Recorder()
    drafting = threading.Event()

    def slow():  # in a request, not submitting until told
        with batcher.request():
            drafting.wait()

    other = threading.Thread(target=slow)
    other.start()
    while batcher.active < 1:
        time.sleep(0.001)
    waiting = threading.Thread(target=submit_in_request, args=(batcher, context, [7]))
    waiting.start()
    assert not batcher.step(0.2)  # the drafting request may still add its extend
    drafting.set()
    other.join(5.0)
    assert batcher.step(5.0)
    waiting.join(5.0)
    assert context.decodes == [[[7]]]


def test_a_thread_in_no_request_decodes_at_once():
    batcher, context = Batcher(), Recorder()
    thread = threading.Thread(target=batcher.submit, args=(context, Submission([3], [0], [[0]], None)))
    thread.start()
    thread.join(5.0)
    assert context.decodes == [[[3]]] and batcher.steps == 0


def test_a_slot_edits_the_cache_only_under_the_cache_lock():
    from types import SimpleNamespace

    from specplan.runtime.llama_cpp_shared import LockedCache

    calls = []
    module = SimpleNamespace(llama_memory_seq_rm=lambda *args: calls.append(args), llama_decode=lambda *args: "free")
    lock = threading.Lock()
    cache = LockedCache(module, lock)
    assert cache.llama_decode() == "free"
    lock.acquire()  # another slot's edit, or the batcher's decode, is in flight
    edit = threading.Thread(target=cache.llama_memory_seq_rm, args=("memory", 3, -1, -1))
    edit.start()
    edit.join(0.2)
    assert edit.is_alive() and calls == []
    lock.release()
    edit.join(5.0)
    assert calls == [("memory", 3, -1, -1)]


# ---- slot sessions on the default GGUF ------------------------------------------------------------

PROMPTS = ("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
           "The three primary colours of light are red, green and blue. The three primary colours of paint are")


@pytest.fixture(scope="module")
def gguf():
    pytest.importorskip("llama_cpp")
    from specplan.models.load import default_gguf_path

    try:
        return default_gguf_path()
    except SpecplanError as error:
        pytest.skip(str(error))


@pytest.fixture(scope="module")
def shared(gguf):
    from specplan.runtime.llama_cpp_shared import SharedModels

    models = SharedModels(2, 1024, threads=1)  # 1 thread: a shared 2-core box
    yield models
    models.close()


def lookup_engine(session):
    from specplan.runtime.drafters.ngram import NgramDrafter
    from specplan.runtime.engine import SpeculativeEngine

    return SpeculativeEngine(session, torch.device("cpu"), set(session.eos_ids), NgramDrafter(3, 1), gamma=4,
                             names=("ngram-3", "target"))


def greedy(engine, prompt_ids, tokens=24):
    from specplan.runtime.drafters.base import SamplingConfig

    return list(engine.generate(prompt_ids, tokens, SamplingConfig()).token_ids)


def test_requests_decoded_together_answer_as_one_session_alone(shared, gguf):
    from specplan.runtime.llama_cpp_session import LlamaCppSession
    from specplan.runtime.lossless import divergence_gap, first_divergence, NEAR_TIE

    sessions = [shared(gguf, False) for _ in PROMPTS]
    try:
        prompts = [sessions[0].tokenize(text) for text in PROMPTS]
        together: dict[int, list[int]] = {}

        def one(index):
            with shared.batcher.request():
                together[index] = greedy(lookup_engine(sessions[index]), prompts[index])

        threads = [threading.Thread(target=one, args=(index,)) for index in range(len(PROMPTS))]
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            shared.batcher.step(0.05)
        assert shared.batcher.steps > 0 and shared.batcher.extends > shared.batcher.steps  # rounds shared forwards
        with LlamaCppSession(gguf, n_ctx=1024, threads=1, exact=False) as alone:
            for index, prompt in enumerate(prompts):
                expected = greedy(lookup_engine(alone), prompt)
                where = first_divergence(expected, together[index])
                if where is not None:  # batched rows may round a near-tie the other way
                    assert divergence_gap(alone, prompt, expected, where) < NEAR_TIE
                assert len(together[index]) == len(expected)
    finally:
        for session in sessions:
            session.close()


def agree_up_to_near_ties(rows: torch.Tensor, expected: torch.Tensor) -> bool:
    """Each row's argmax equals expected's, or expected's top-2 gap there is a near-tie (fast numerics)."""
    from specplan.runtime.lossless import NEAR_TIE

    top = expected.topk(2, dim=1).values
    differs = rows.argmax(1) != expected.argmax(1)
    return bool(((top[:, 0] - top[:, 1])[differs] < NEAR_TIE).all())


def test_a_slot_tree_beside_another_slot_equals_its_path_chains(shared, gguf):
    from specplan.runtime.tree import DraftTree

    first, second = shared(gguf, False), shared(gguf, False)
    try:
        text = first.tokenize(PROMPTS[0] + PROMPTS[1] + PROMPTS[0])
        second.extend(text[:40])  # the other slot's cells lie among this one's
        first.extend(text[:20])
        parents = (-1, 0, 0, 1)
        nodes = text[20:24]
        rows = first.extend(nodes, DraftTree(parents, torch.tensor(nodes)))
        first.keep(20, [0, 1, 3])  # frees node 2's cell, which the next extends may take
        second.extend(text[40:44])
        chain = first.extend(text[25:41])  # continues the kept path 0 -> 1 -> 3
        assert first.cached == text[:20] + [nodes[0], nodes[1], nodes[3]] + text[25:41]
        assert second.cached == text[:44]
        first.reset()
        alone = first.extend(text[:20] + [nodes[0], nodes[1], nodes[3]] + text[25:41])  # a fresh slot, no tree
        assert agree_up_to_near_ties(rows[[0, 1, 3]], alone[20:23])
        assert agree_up_to_near_ties(chain, alone[23:])
    finally:
        first.close()
        second.close()


def test_slots_are_taken_and_given_back(shared, gguf):
    sessions = [shared(gguf, False), shared(gguf, False)]
    with pytest.raises(SpecplanError, match="slots .* are taken"):
        shared(gguf, False)
    sessions[0].extend(sessions[0].tokenize("Hello there"))
    sessions[0].close()
    again = shared(gguf, False)
    assert again.cached == [] and again.slot == sessions[0].slot
    again.close()
    sessions[1].close()
    with pytest.raises(SpecplanError, match="fast numerics"):
        shared(gguf, True)

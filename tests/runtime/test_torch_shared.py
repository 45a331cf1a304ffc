"""Sequences decoded together on torch (runtime/torch_shared.py), on tiny random Llamas: each sequence on
an engine of its own, their forwards batched over rows of one cache per network; every sequence
token-identical (float32) to its prompt decoded alone by plain greedy decoding, with prompts of different
lengths, drafts accepted to different lengths in one forward, rollback holes kept or packed, trees, model
drafters sharing one batched cache, and EOS."""

from __future__ import annotations

import functools

import pytest
import torch

from specplan.core.plan import StageShape
from specplan.runtime.batched_kv import BatchedKV
from specplan.runtime.batcher import generate_together
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.drafters.layerskip import layer_skip_view, parse_kept_layers
from specplan.runtime.drafters.model import ModelDrafter
from specplan.runtime.drafters.ngram import NgramDrafter
from specplan.runtime.drafters.recycle import RecycleDrafter
from specplan.runtime.engine import SpeculativeEngine
from specplan.runtime.torch_shared import SharedNetworks
from specplan.runtime.tree import DraftTree
from tests.runtime.tiny_models import tiny_llama

CPU = torch.device("cpu")
PROMPTS = [
    [1, 5, 9, 5, 9, 5, 9, 12],
    [3, 4, 5, 6, 7, 3, 4, 5],
    [20, 21, 22, 23, 24, 25, 26, 27, 28, 20, 21],
    [7],
    [8] * 17,
]
NEW_TOKENS = 24
GREEDY = SamplingConfig()


def plain_alone(target, prompts, new_tokens=NEW_TOKENS, eos=frozenset()):
    engine = SpeculativeEngine(target, CPU, eos_ids=set(eos))
    return [list(engine.generate(prompt, new_tokens, GREEDY).token_ids) for prompt in prompts]


@functools.cache
def reference(attn: str) -> list[list[int]]:
    return plain_alone(tiny_llama(attn, seed=0), PROMPTS)


def engines(name: str, attn: str, target, networks: SharedNetworks, eos=frozenset()) -> list[SpeculativeEngine]:
    """One engine per prompt of ``name``'s stage, every session a row of ``networks``."""
    draft_network = {"model": lambda: tiny_llama(attn, seed=1), "self": lambda: tiny_llama(attn, seed=0),
                     "layerskip": lambda: layer_skip_view(target, parse_kept_layers("1", 2))}  # layer 0's cache stays empty
    made = []
    for _ in PROMPTS:
        session = networks.session(target)
        if name == "plain":
            made.append(SpeculativeEngine(session, CPU, set(eos)))
        elif name == "ngram":
            made.append(SpeculativeEngine(session, CPU, set(eos), NgramDrafter(3), gamma=4))
        elif name == "tree":
            shape = StageShape("tree", parents=(-1, 0, 0, 1, 1, 2, 3))
            made.append(SpeculativeEngine(session, CPU, set(eos), RecycleDrafter(), tree=shape))
        else:
            network = networks.network(name, draft_network[name])
            made.append(SpeculativeEngine(session, CPU, set(eos), ModelDrafter(name, networks.session(network), CPU),
                                          gamma=4 if name == "self" else 3))
    return made


# compact_holes 0: the cache is packed after every forward; 1: never (rollback holes stay masked)
@pytest.mark.parametrize("attn, name, compact_holes", [
    ("sdpa", "plain", 1.0), ("sdpa", "ngram", 0.0), ("sdpa", "ngram", 1.0), ("eager", "ngram", 1.0),
    ("sdpa", "model", 1.0), ("eager", "model", 0.0), ("sdpa", "self", 0.25), ("sdpa", "layerskip", 1.0),
    ("sdpa", "tree", 0.25), ("eager", "tree", 1.0),
])
def test_together_is_token_identical_to_each_prompt_alone(attn, name, compact_holes):
    target = tiny_llama(attn, seed=0)
    networks = SharedNetworks(len(PROMPTS))
    made = engines(name, attn, target, networks)
    for shared in networks._batches.values():
        shared.kv.compact_holes = compact_holes
    result = generate_together(networks.batcher, made, PROMPTS, NEW_TOKENS, [GREEDY] * len(PROMPTS))
    assert [list(sequence.token_ids) for sequence in result.sequences] == reference(attn)
    assert all(sequence.stop_reason == "max_new_tokens" for sequence in result.sequences)
    assert result.new_tokens == NEW_TOKENS * len(PROMPTS) and result.decode_tokens_per_s > 0
    if name in ("plain", "ngram", "tree"):  # no drafter model: every step is the target's
        assert result.steps < sum(sequence.target_forwards for sequence in result.sequences)  # rounds shared forwards
    if name == "self":  # full acceptance: far fewer target forwards than tokens
        assert max(sequence.target_forwards for sequence in result.sequences) < NEW_TOKENS / 2
    if name == "ngram":  # sequences accept different lengths in the same forwards
        assert len({round(sequence.mean_accepted, 3) for sequence in result.sequences}) > 1


def test_each_sequence_stops_at_its_own_eos():
    target = tiny_llama("sdpa", seed=0)
    alone = reference("sdpa")
    eos = {alone[0][3], alone[2][10]}
    expected = plain_alone(target, PROMPTS, eos=eos)
    networks = SharedNetworks(len(PROMPTS))
    result = generate_together(networks.batcher, engines("ngram", "sdpa", target, networks, eos), PROMPTS, NEW_TOKENS,
                               [GREEDY] * len(PROMPTS))
    assert [list(sequence.token_ids) for sequence in result.sequences] == expected
    stopped = [sequence.stop_reason for sequence in result.sequences]
    assert stopped[0] == "eos" and len(result.sequences[0].token_ids) < NEW_TOKENS


def test_a_drafter_network_is_loaded_once_for_every_slot():
    networks = SharedNetworks(3)
    loads = []
    first = networks.network("model:x", lambda: loads.append(1) or tiny_llama("sdpa", seed=1))
    assert networks.network("model:x", lambda: loads.append(1) or tiny_llama("sdpa", seed=1)) is first
    assert loads == [1]
    sessions = [networks.session(first) for _ in range(3)]
    assert [session.slot for session in sessions] == [0, 1, 2] and networks.shared(first).slots == 3
    with pytest.raises(Exception, match="slots of a network are taken"):
        networks.session(first)
    sessions[1].close()
    assert networks.session(first).slot == 1  # a closed session's row is free again


def test_rollback_leaves_holes_that_the_mask_hides():
    """Rejected drafts of one sequence leave masked slots beside another's accepted ones; the next
    forward still reads each sequence's own tokens only (checked against the logits alone)."""
    target = tiny_llama("eager", seed=0)
    kv = BatchedKV(target, CPU, compact_holes=1.0)
    kv.forward([[1, 2, 3, 4, 5], [9, 8]])
    kv.forward([[6, 40, 41], [7, 50, 51]])
    kv.drop([1], torch.tensor([2, 3, 4, kv.slots - 2, kv.slots - 1]))  # sequence 1: its first forward's padding, its draft
    assert kv.holes() > 0 and kv.lengths() == [8, 3]
    logits = kv.forward([[42], [60]])
    for index, text in enumerate([[1, 2, 3, 4, 5, 6, 40, 41, 42], [9, 8, 7, 60]]):
        with torch.no_grad():
            alone = target(torch.tensor([text])).logits[0, -1]
        torch.testing.assert_close(logits[index, 0], alone, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_a_forward_over_some_sequences_feeds_only_theirs(attn):
    """A forward over some sequences runs the network over their rows alone (a sequence with nothing to
    decode costs no work); each one's logits are as alone, the others' rows and lengths stay as they were,
    and later forwards over all of them, a chain beside a tree, still read each sequence's own tokens."""
    target = tiny_llama(attn, seed=0)
    kv = BatchedKV(target, CPU, compact_holes=1.0)
    kv.forward([[1, 2, 3, 4, 5], [9, 8], [30, 31, 32]])
    batches = []
    hook = target.register_forward_pre_hook(lambda module, args, kwargs: batches.append(kwargs["input_ids"].shape[0]),
                                            with_kwargs=True)
    logits = kv.forward([[6, 7], [33]], sequences=[0, 2])  # sequence 1 decodes nothing
    hook.remove()
    assert batches == [2] and logits.shape[0] == 2 and kv.lengths() == [7, 2, 4]
    for text, row in (([1, 2, 3, 4, 5, 6, 7], logits[0, 1]), ([30, 31, 32, 33], logits[1, 0])):
        with torch.no_grad():
            alone = target(torch.tensor([text])).logits[0, -1]
        torch.testing.assert_close(row, alone, rtol=1e-4, atol=1e-4)
    kv.forward([[10], [11]], sequences=[1, 2])
    kv.drop([2], torch.tensor([kv.slots - 1]))  # sequence 2 rejects its token
    chain = DraftTree.chain(torch.tensor([12, 13]))
    tree = DraftTree((-1, 0, 0), torch.tensor([40, 41, 42]))
    logits = kv.forward([[12, 13], [43], [40, 41, 42]], [chain, DraftTree.chain(torch.tensor([43])), tree])
    expected = [([1, 2, 3, 4, 5, 6, 7, 12, 13], logits[0, 1]), ([9, 8, 10, 43], logits[1, 0]),
                ([30, 31, 32, 33, 40, 42], logits[2, 2])]
    for text, row in expected:
        with torch.no_grad():
            alone = target(torch.tensor([text])).logits[0, -1]
        torch.testing.assert_close(row, alone, rtol=1e-4, atol=1e-4)


def test_a_forward_writes_in_place_and_free_rows_are_no_holes():
    """The layers keep room along the slot axis: forwards and crops within it move no buffer. A free row
    (holding no token) is not counted as holes, so one sequence decoding alone in a batch of three does not
    pack the cache after every rejected draft."""
    target = tiny_llama("sdpa", seed=0)
    kv = BatchedKV(target, CPU)
    kv.mask = torch.zeros((3, 0), dtype=torch.long)
    kv.forward([[1, 2, 3, 4]], sequences=[1])
    buffers = [layer._keys.data_ptr() for layer in kv.cache.layers]
    assert kv.holes() == 0 and kv.lengths() == [0, 4, 0]
    kv.forward([[5, 6, 7]], sequences=[1])
    kv.drop([1], torch.tensor([kv.slots - 2]))  # a hole in the middle of the one row in use: 1 of 7 slots
    kv.forward([[8]], sequences=[1])
    kv.drop([1], torch.tensor([kv.slots - 1]))  # a trailing rejected token: cropped
    assert kv.slots == 7 and kv.holes() == 1 and kv.lengths() == [0, 6, 0]
    assert [layer._keys.data_ptr() for layer in kv.cache.layers] == buffers
    assert all(layer.keys.shape == (3, layer.keys.shape[1], 7, layer.keys.shape[-1]) for layer in kv.cache.layers)


def test_cache_layers_other_than_full_attention_are_refused():
    from transformers.cache_utils import DynamicSlidingWindowLayer

    from specplan.core.errors import SpecplanError

    kv = BatchedKV(tiny_llama("sdpa", seed=0), CPU)
    kv.cache.layers[0] = DynamicSlidingWindowLayer(sliding_window=4)
    with pytest.raises(SpecplanError, match="full-attention cache layers; this model's are"):
        kv.forward([[1, 2], [3]])


def test_an_advance_runs_the_lm_head_for_the_last_token_only():
    """A prefill nobody reads (``advance``) runs the LM head for one row, alone and in a step of advances
    decoded together; a step where any sequence reads its rows runs it for every row. The cache is the one
    ``extend`` leaves (tests/runtime/test_session_conformance*.py)."""
    from specplan.runtime.session import ModelSession

    target = tiny_llama("sdpa", seed=0)
    rows = []
    hook = target.get_output_embeddings().register_forward_hook(lambda module, args, output: rows.append(args[0].shape[:2]))
    alone = ModelSession(target, CPU)
    alone.advance(PROMPTS[0])
    networks = SharedNetworks(2)
    first, second = networks.session(target), networks.session(target)
    generate_together(networks.batcher, [SpeculativeEngine(first, CPU, set()), SpeculativeEngine(second, CPU, set())],
                      PROMPTS[:2], 2, [GREEDY] * 2)
    hook.remove()
    assert rows[0] == (1, 1)  # alone: the prompt's 8 tokens, one row through the head
    assert rows[1] == (2, 1)  # together: both prompts' prefills (all but the last token), one row each
    assert all(shape[1] >= 1 for shape in rows[2:]) and any(shape[0] == 2 for shape in rows[2:])


def test_a_forward_that_raises_leaves_every_row_as_it_was():
    """An error in the batched forward reaches every sequence that waited on it, and the cache is as
    before: the sequences go on as alone."""
    target = tiny_llama("sdpa", seed=0)
    networks = SharedNetworks(2)
    first, second = networks.session(target), networks.session(target)
    first.extend(PROMPTS[0])
    shared = networks.shared(target)
    slots, mask = shared.kv.slots, shared.kv.mask.clone()
    with pytest.raises(IndexError):
        second.extend([10**6])  # beyond the vocabulary: the embedding raises
    assert second.cached == [] and shared.kv.slots == slots and torch.equal(shared.kv.mask, mask)
    rows = first.extend([3])
    with torch.no_grad():
        alone = target(torch.tensor([PROMPTS[0] + [3]])).logits[0, -1]
    torch.testing.assert_close(rows[-1], alone, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["ngram", "tree"])
def test_eight_real_prompts_together_are_identical_to_each_alone(default_model_dir, stage):
    """The real default model (SmolLM2-135M-Instruct) in float32, 8 Spec-Bench prompts of different lengths
    decoded together by n-gram chains or recycling trees: every output the prompt's plain greedy one."""
    from specplan.core.prompts import spec_bench_split, stratified
    from specplan.models.chat import encode_prompt
    from specplan.models.load import load_model
    from specplan.runtime.build import eos_ids

    loaded = load_model("default", "float32")
    prompts = [encode_prompt(loaded.tokenizer, prompt.text) for prompt in stratified(spec_bench_split("evaluation"), 8)]
    stop = eos_ids(loaded)
    expected = plain_alone(loaded.model, prompts, 48, stop)
    networks = SharedNetworks(len(prompts))
    shape = StageShape("tree", parents=(-1, 0, 0, 1, 1, 2, 3))
    made = [SpeculativeEngine(networks.session(loaded.model), CPU, stop, NgramDrafter(3), gamma=4) if stage == "ngram"
            else SpeculativeEngine(networks.session(loaded.model), CPU, stop, RecycleDrafter(), tree=shape)
            for _ in prompts]
    result = generate_together(networks.batcher, made, prompts, 48, [GREEDY] * len(prompts))
    assert [list(sequence.token_ids) for sequence in result.sequences] == expected
    assert result.steps < sum(sequence.target_forwards + 1 for sequence in result.sequences)

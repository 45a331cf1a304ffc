"""The session contract (runtime/backend.py) checked the same way on every backend.

``torch``: ModelSession over a tiny random Llama (float32). ``llama.cpp``: LlamaCppSession over the
default model's GGUF (SmolLM2-135M, Q4_1), skipped when llama-cpp-python is not installed. The
llama.cpp session's default settings (``exact``) make an extend of fewer than 64 tokens
bit-identical to one-token extends (docs/backends.md), so its rows are compared with
``torch.equal``; the torch rows with a float32 tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from tests.runtime.tiny_models import TINY_VOCAB, tiny_llama

from specplan.core.errors import SpecplanError
from specplan.runtime.backend import Session
from specplan.runtime.lossless import NEAR_TIE
from specplan.runtime.tree import DraftTree

#          0
#       /  |  \
#      1   2   3
#     / \   \
#    4   5   6
#    |       |
#    7       8
PARENTS = (-1, 0, 0, 0, 1, 1, 2, 4, 6)
LEAVES = (3, 5, 7, 8)
DEPTH_FIRST = (-1, 0, 1, 2, 0, 4)  # node 4 (depth 1) after nodes 2 and 3 (depths 2 and 3)
GREEDY_STEPS = 20
PROSE = " ".join(f"Step {index}: the cache keeps {index * 7 % 13} keys for the draft tree." for index in range(60))


@dataclass
class Backend:
    """A session under test, the token ids tests feed it, and how closely rows must agree."""

    name: str
    session: Session
    text: list[int]  # token ids to feed, at least 320
    exact: bool  # rows must be bit-identical (else within atol)
    atol: float = 1e-4

    def assert_rows(self, rows: torch.Tensor, expected: torch.Tensor) -> None:
        """The two logits blocks agree: bit for bit when exact, else within atol."""
        assert rows.shape == expected.shape and rows.dtype == torch.float32
        if self.exact:
            assert torch.equal(rows, expected), f"max |difference| {(rows - expected).abs().max().item():.3g}"
        else:
            torch.testing.assert_close(rows, expected, atol=self.atol, rtol=0)


def torch_backend() -> Backend:
    """ModelSession over a tiny random Llama; the text is pseudo-random ids of its vocab."""
    from specplan.runtime.session import ModelSession

    generator = torch.Generator().manual_seed(3)
    text = torch.randint(0, TINY_VOCAB, (400,), generator=generator).tolist()
    return Backend("torch", ModelSession(tiny_llama(), torch.device("cpu")), text, exact=False)


def default_gguf_or_skip():
    """The default model's GGUF; the test is skipped without llama-cpp-python or the model."""
    pytest.importorskip("llama_cpp")
    from specplan.models.load import default_gguf_path

    try:
        return default_gguf_path()
    except SpecplanError as error:
        pytest.skip(str(error))


def llama_cpp_backend() -> Backend:
    """LlamaCppSession over the default GGUF; the text is English prose in its tokens."""
    from specplan.runtime.llama_cpp_session import LlamaCppSession

    path = default_gguf_or_skip()
    session = LlamaCppSession(path, n_ctx=1024, threads=1, max_tree_paths=8)  # 1 thread: a shared 2-core box
    return Backend("llama.cpp", session, session.tokenize(PROSE, True), exact=True)


@pytest.fixture(scope="module", params=["torch", "llama.cpp"])
def backend(request):
    made = torch_backend() if request.param == "torch" else llama_cpp_backend()
    yield made
    if hasattr(made.session, "close"):
        made.session.close()


def one_token_greedy(session: Session, first: int, steps: int) -> tuple[list[int], torch.Tensor]:
    """Greedy decoding one token per extend from ``first``: the tokens fed and their rows."""
    tokens, rows = [first], []
    for _ in range(steps):
        rows.append(session.extend([tokens[-1]])[0])
        tokens.append(int(rows[-1].argmax()))
    return tokens[:-1], torch.stack(rows)


def argmax_divergences_are_near_ties(rows: torch.Tensor, expected: torch.Tensor) -> bool:
    """Where the argmax of ``rows`` differs from ``expected``'s, expected's top-2 gap is below NEAR_TIE."""
    top = expected.topk(2, dim=1).values
    differs = rows.argmax(1) != expected.argmax(1)
    return bool(((top[:, 0] - top[:, 1])[differs] < NEAR_TIE).all())


def feed_chain(session: Session, tokens: list[int], piece: int = 32) -> torch.Tensor:
    """Extend by ``tokens`` in pieces of at most ``piece`` (each piece under llama.cpp's exact limit of 64)."""
    return torch.cat([session.extend(tokens[first:first + piece]) for first in range(0, len(tokens), piece)])


def start(backend: Backend, prefix: int) -> list[int]:
    """Reset the session and feed the first ``prefix`` text tokens; return them."""
    backend.session.reset()
    tokens = backend.text[:prefix]
    backend.session.extend(tokens)
    return tokens


def tree_tokens(backend: Backend, prefix: int) -> list[int]:
    """Tokens for PARENTS' nodes: the root is the next text token, the others text tokens further on."""
    return [backend.text[prefix]] + backend.text[prefix + 5:prefix + 5 + len(PARENTS) - 1]


# ---- (1) a chain extend equals one-token greedy decoding -----------------------------------------


@pytest.mark.parametrize("prefix", [12, 300])  # 300: llama.cpp's cache view passes 512 cells
def test_chain_extend_equals_one_token_decodes(backend, prefix):
    session = backend.session
    start(backend, prefix)
    fed, expected = one_token_greedy(session, backend.text[prefix], GREEDY_STEPS)
    assert session.cached == backend.text[:prefix] + fed and session.forwards > GREEDY_STEPS
    session.trim(prefix)
    rows = session.extend(fed)
    assert rows.shape == (GREEDY_STEPS, expected.shape[1])
    if backend.exact:
        backend.assert_rows(rows, expected)
    else:
        assert argmax_divergences_are_near_ties(rows, expected)
        backend.assert_rows(rows, expected)


def test_width_flip_finds_the_greedy_token_at_one_and_the_least_likely_at_none(backend):
    """runtime/lossless.py ``width_flip``: the narrowest verify width whose decode makes a token the argmax at
    a position. The greedy token is decoded at width 1 (and, rows agreeing at every width here, the least
    likely token at none: 0); the session is left reset."""
    from specplan.runtime.lossless import width_flip

    session = backend.session
    session.reset()
    prompt, answer = backend.text[:40], backend.text[40:60]
    row = session.extend(prompt + answer)[-1]
    greedy, least = int(row.argmax()), int(row.argmin())
    session.reset()
    assert width_flip(session, prompt, answer + [greedy], 20, greedy, widths=(1, 4, 16)) == 1
    assert width_flip(session, prompt, answer + [least], 20, least, widths=(1, 4, 16)) == 0
    assert session.cached == []


# ---- (2) a tree's rows equal each root-to-leaf path fed as a chain -------------------------------


def test_tree_rows_equal_path_chains(backend):
    session = backend.session
    prefix = 40
    start(backend, prefix)
    tokens = tree_tokens(backend, prefix)
    tree = DraftTree(PARENTS, torch.tensor(tokens))
    rows = session.extend(tokens, tree)
    assert rows.shape[0] == len(PARENTS) and session.cached[prefix:] == tokens
    for leaf in LEAVES:
        path = list(tree.path_to(leaf))
        session.trim(prefix)
        backend.assert_rows(session.extend([tokens[node] for node in path]), rows[path])


# ---- (3) keep a path of a tree, then extend: as if the path had been fed as a chain ------------


@pytest.mark.parametrize("nodes", [[0, 2, 6, 8], [0, 1], [0], [0, 3]])
def test_keep_then_extend_equals_chain(backend, nodes):
    session = backend.session
    prefix = 40
    tokens = tree_tokens(backend, prefix)
    following = backend.text[prefix + 20:prefix + 23]
    start(backend, prefix)
    session.extend(tokens, DraftTree(PARENTS, torch.tensor(tokens)))
    session.keep(prefix, nodes)
    kept = [tokens[node] for node in nodes]
    assert session.cached == backend.text[:prefix] + kept
    rows = session.extend(following)
    start(backend, prefix)
    session.extend(kept)
    backend.assert_rows(rows, session.extend(following))


def test_keep_after_chain_extend(backend):
    session = backend.session
    prefix = 30
    draft = backend.text[prefix:prefix + 6]
    following = backend.text[prefix + 10:prefix + 12]
    start(backend, prefix)
    session.extend(draft)
    session.keep(prefix, [0, 1, 2])
    rows = session.extend(following)
    start(backend, prefix)
    session.extend(draft[:3])
    backend.assert_rows(rows, session.extend(following))


ROUNDS = [(PARENTS, [0, 2, 6, 8]), (DEPTH_FIRST, [0, 4, 5]), (PARENTS, [0, 3]), (DEPTH_FIRST, [0, 1, 2, 3]),
          (PARENTS, [])]


def test_rounds_of_tree_keep_equal_one_chain(backend):
    session = backend.session
    prefix = 40
    start(backend, prefix)
    kept = []
    for round_index, (parents, nodes) in enumerate(ROUNDS):
        first = prefix + 10 * round_index
        tokens = backend.text[first:first + len(parents)]
        session.extend(tokens, DraftTree(parents, torch.tensor(tokens)))
        session.keep(prefix + len(kept), nodes)
        kept += [tokens[node] for node in nodes]
        assert session.cached == backend.text[:prefix] + kept
    following = backend.text[200:204]
    rows = session.extend(following)
    start(backend, prefix)
    session.extend(kept)
    backend.assert_rows(rows, session.extend(following))


def test_llama_cpp_compaction_keeps_rows_exact(backend):
    """Rejected cells below kept ones stay as junk until the cache is full; then sequence 0 is
    compacted, and the rows still equal a chain's."""
    if backend.name != "llama.cpp":
        pytest.skip("llama.cpp cache compaction")
    from specplan.runtime.llama_cpp_session import LlamaCppSession

    prefix, tokens, nodes = 40, tree_tokens(backend, 40), [0, 2, 6, 8]  # 5 junk cells per round
    with LlamaCppSession(backend.session.model_path, n_ctx=256, threads=1, max_tree_paths=8) as session:
        session.extend(backend.text[:prefix])
        rounds = 0
        while session.compactions == 0:
            session.extend(tokens, DraftTree(PARENTS, torch.tensor(tokens)))
            session.keep(len(session.cached) - len(tokens), nodes)
            rounds += 1
            assert rounds < session.n_ctx // 9
        rows = session.extend(backend.text[:3])
        kept = session.cached[prefix:-3]
        session.reset()
        session.extend(backend.text[:prefix])
        feed_chain(session, kept)
        assert torch.equal(rows, session.extend(backend.text[:3]))


def wide_script(session, text: list[int]) -> list[torch.Tensor]:
    """Extends of every kind in the order rounds make them: a long prefill, one-token rounds,
    a chain verify kept in part, a tree kept along a path, chains of both widths, trims."""
    session.reset()
    rows = [session.extend(text[:100])]
    rows += [session.extend([token]) for token in text[100:104]]
    rows.append(session.extend(text[104:112]))
    session.keep(104, [0, 1, 2])
    rows.append(session.extend(text[107:108]))
    tokens = text[108:113]
    rows.append(session.extend(tokens, DraftTree((-1, 0, 0, 1, 2), torch.tensor(tokens))))
    session.keep(108, [0, 1, 3])
    rows.append(session.extend(text[111:120]))
    session.trim(113)
    rows += [session.extend(text[113:118]), session.extend(text[118:119])]
    session.trim(50)
    rows.append(session.extend(text[50:51]))
    return rows


def test_llama_cpp_wide_extends_equal_one_context(backend):
    """A session that verifies chains of 5 or more on a second, unrepacked copy of the weights
    gives every row of a session without one, bit for bit: the default GGUF (Q4_1) has no
    repacked kernel, so the copies of sequence 0 between the contexts are all that differs."""
    if backend.name != "llama.cpp":
        pytest.skip("llama.cpp wide verifies")
    from specplan.runtime.llama_cpp_session import LlamaCppSession, repacks_weights

    if not repacks_weights(False):
        pytest.skip("this CPU's llama.cpp does not repack weights (AMX)")
    path = backend.session.model_path
    with LlamaCppSession(path, n_ctx=512, threads=1, max_tree_paths=8, exact=False) as one:
        expected, cached = wide_script(one, backend.text), list(one.cached)
    with LlamaCppSession(path, n_ctx=512, threads=1, max_tree_paths=8, exact=False, wide_from=5) as two:
        rows = wide_script(two, backend.text)
        assert two.cached == cached and two.copies == 5  # wide->one, one->wide, wide->one (twice), one->wide
    for got, want in zip(rows, expected, strict=True):
        assert torch.equal(got, want)
    with LlamaCppSession(path, n_ctx=64, threads=1, max_tree_paths=8, wide_from=5) as exact:
        assert exact.wide_from == 0  # exact numerics never repack: a second copy would be the same kernels


@pytest.mark.slow  # two threads thrash on a busy 2-core machine
def test_llama_cpp_exact_on_two_threads(backend):
    """With several threads, one-token decodes still match a batch bit for bit past 512 cache cells
    (exact); without exact, any argmax that parts is a near-tie."""
    if backend.name != "llama.cpp":
        pytest.skip("llama.cpp threads")
    from specplan.runtime.llama_cpp_session import LlamaCppSession

    for exact in (True, False):
        with LlamaCppSession(backend.session.model_path, n_ctx=1024, threads=2, max_tree_paths=8, exact=exact) as session:
            session.extend(backend.text[:300])
            fed, expected = one_token_greedy(session, backend.text[300], 8)
            session.trim(300)
            rows = session.extend(fed)
        if exact:
            assert torch.equal(rows, expected)
        else:  # one-token decodes on 2 threads split the keys: near-ties may part, nothing else
            assert argmax_divergences_are_near_ties(rows, expected)
    with pytest.raises(SpecplanError, match="closed"):
        session.extend(fed)


# ---- (4) trim and rewind_to, then extend: the earlier rows again -------------------------------


@pytest.mark.parametrize("prefix", [12, 90])
def test_advance_equals_extend(backend, prefix):
    """``advance`` (no logits rows: a prefill nobody reads) leaves the cache as ``extend`` does: the
    next rows are the same, over a short prefix and one of 64 tokens or more (the tiled kernel),
    and after a tree round's keep."""
    session = backend.session
    following = backend.text[prefix:prefix + 3]
    session.reset()
    session.advance(backend.text[:prefix])
    assert session.cached == backend.text[:prefix]
    rows = session.extend(following)
    session.reset()
    session.extend(backend.text[:prefix])
    backend.assert_rows(rows, session.extend(following))
    tokens = tree_tokens(backend, prefix)
    start(backend, prefix)
    session.extend(tokens, DraftTree(PARENTS, torch.tensor(tokens)))
    session.keep(prefix, [0, 2])
    session.advance(following)
    rows = session.extend(backend.text[prefix + 30:prefix + 32])
    start(backend, prefix)
    session.extend([tokens[0], tokens[2], *following])
    backend.assert_rows(rows, session.extend(backend.text[prefix + 30:prefix + 32]))


def test_extend_best_tokens_is_the_argmax_of_extend(backend):
    """``extend_best_tokens`` (a greedy round that nothing else watches) returns each row's argmax
    and leaves the cache as ``extend`` does, over chains of several widths in turn (llama.cpp's
    logits buffer viewed again at each width), over a tree, and after a tree round's keep."""
    from specplan.runtime.verify import best_tokens

    session, prefix = backend.session, 40
    for width in (1, 5, 1, 17, 1):
        chain = backend.text[prefix:prefix + width]
        following = backend.text[prefix + width:prefix + width + 2]
        start(backend, prefix)
        best = session.extend_best_tokens(chain)
        assert session.cached == backend.text[:prefix + width]
        after = session.extend(following)
        start(backend, prefix)
        expected = session.extend(chain)
        assert best == best_tokens(expected), width
        backend.assert_rows(after, session.extend(following))
    tokens = tree_tokens(backend, prefix)
    tree = DraftTree(PARENTS, torch.tensor(tokens))
    start(backend, prefix)
    rows = session.extend(tokens, tree)
    start(backend, prefix)
    assert session.extend_best_tokens(tokens, tree) == best_tokens(rows)
    session.keep(prefix, [0, 2])
    best = session.extend_best_tokens(backend.text[prefix + 30:prefix + 33])
    start(backend, prefix)
    session.extend([tokens[0], tokens[2]])
    assert best == best_tokens(session.extend(backend.text[prefix + 30:prefix + 33]))


def test_trim_and_rewind_reproduce_rows(backend):
    session = backend.session
    prefix = 30
    more = backend.text[prefix:prefix + 6]
    start(backend, prefix)
    first = session.extend(more)
    session.trim(prefix)
    assert session.cached == backend.text[:prefix]
    backend.assert_rows(session.extend(more), first)
    other = backend.text[prefix + 40:prefix + 42]
    left = session.rewind_to(backend.text[:prefix] + more[:3] + other)
    assert left == other and session.cached == backend.text[:prefix] + more[:3]
    rewound = session.extend(left)
    session.trim(prefix)
    backend.assert_rows(rewound, session.extend(more[:3] + other)[3:])


# ---- (5) reset ----------------------------------------------------------------------------------


def test_reset_empties_the_cache(backend):
    session = backend.session
    session.reset()
    first = session.extend(backend.text[:10])
    session.extend(backend.text[10:30])
    session.reset()
    assert session.cached == []
    backend.assert_rows(session.extend(backend.text[:10]), first)


def test_no_features(backend):
    if backend.name == "torch":
        pytest.skip("the torch backend returns hidden states")
    with pytest.raises(TypeError):
        backend.session.keep_features = True
    assert backend.session.keep_features is False


# ---- llama.cpp only: errors say what to change ---------------------------------------------------


def test_llama_cpp_errors(backend, tmp_path):
    if backend.name != "llama.cpp":
        pytest.skip("llama.cpp session errors")
    from specplan.runtime.llama_cpp_session import LlamaCppSession

    with pytest.raises(SpecplanError, match="does not exist"):
        LlamaCppSession(tmp_path / "missing.gguf")
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + bytes(60))
    with pytest.raises(SpecplanError, match="could not load"):
        LlamaCppSession(broken)
    session = backend.session
    session.reset()
    with pytest.raises(SpecplanError, match="raise n_ctx"):
        session.extend([backend.text[0]] * (session.n_ctx + 1))
    wide = DraftTree((-1,) + (0,) * 9, torch.tensor(backend.text[:10]))  # 9 leaves, 8 paths allowed
    with pytest.raises(SpecplanError, match="raise max_tree_paths"):
        session.extend(backend.text[:10], wide)
    assert session.cached == [] and session.vocab_size == 49152 and session.eos_ids

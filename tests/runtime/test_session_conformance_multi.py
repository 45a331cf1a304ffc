"""The session contract (runtime/backend.py) with several sequences decoded together: each sequence's
rows equal those of a single-sequence session fed the same extends, keeps, trims, rewinds and resets
alone, whatever the other sequences do.

``llama.cpp``: slot sessions (runtime/llama_cpp_shared.py ``SlotSession``) over the default GGUF, one per
sequence in one shared context, every round's extends decoded in one step of the ``Batcher``; the
reference is a ``LlamaCppSession`` alone. Slot sessions run fast numerics only: where a slot's tokens sit
in a batch and its cells in the cache (after other slots') changes llama.cpp's sums (that module's
docstring). So their rows agree with a session alone up to near-ties in argmax and within
``LOOSE_ATOL``, and that no other sequence's tokens reach them is checked bit for bit: the others fed
different tokens in decodes of the same shapes, each round's extends joining the step in the same order.

``torch``: slot sessions (runtime/torch_shared.py ``TorchSlotSession``) over a tiny random Llama, one row
each of one batched cache, every round's extends decoded in one batched forward; the reference is a
``ModelSession`` alone, in float32 (rows within 1e-4).

The sequences advance in lockstep rounds: each round every sequence extends by its own tokens (a chain,
or a draft tree), then any of them may keep, trim, rewind or reset.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch
from tests.runtime.test_session_conformance import (DEPTH_FIRST, PARENTS, PROSE, argmax_divergences_are_near_ties,
                                                   default_gguf_or_skip)
from tests.runtime.tiny_models import TINY_VOCAB, tiny_llama

from specplan.runtime.backend import Session
from specplan.runtime.lossless import NEAR_TIE
from specplan.runtime.tree import DraftTree

CPU = torch.device("cpu")
# Fast numerics: a slot's rows, decoded in one batch with other slots' tokens, moved by up to 1.8 (mean
# 0.15) over 380 tokens against a session alone, as one-token decodes move against a batch in one
# session alone; not with what the other slots' tokens are (the bit-for-bit test below). A sequence
# that attends to another's 50 tokens moves them by up to 18.
LOOSE_ATOL = 3.0
OFFSETS = (0, 130, 260)  # where each sequence's prompt starts in the backend's text: different prompts
FRESH = 400  # where the prompt of a sequence that was reset starts
GREEDY_STEPS = 6


# ---- several sequences together, and the log each one's session alone replays -------------------


class Together(ABC):
    """``count`` sequences of one model decoded together in lockstep rounds. Each sequence's calls and
    what they returned are logged, for a single-sequence session to replay (:func:`assert_each_as_alone`)."""

    def __init__(self, count: int):
        self.count = count
        self.logs: list[list[tuple[str, tuple]]] = [[] for _ in range(count)]
        self.results: list[list[object]] = [[] for _ in range(count)]  # what each logged call returned
        self.pasts = [0] * count  # where each sequence's last extend began

    @abstractmethod
    def cached(self, index: int) -> list[int]:
        """The tokens sequence ``index`` holds."""

    @abstractmethod
    def _round(self, calls: list[tuple[str, tuple]]) -> list[object]:
        """Sequence i's call ``calls[i]`` (a session method's name and arguments), all decoded together."""

    @abstractmethod
    def _keep(self, kept: dict[int, list[int]]) -> None:
        """Sequence i keeps only ``kept[i]`` of its last extend (the others all of theirs)."""

    @abstractmethod
    def _trim(self, lengths: dict[int, int]) -> None:
        """Sequence i keeps only its first ``lengths[i]`` tokens."""

    @abstractmethod
    def _reset(self, index: int) -> None:
        """Sequence ``index`` holds nothing."""

    def round(self, calls: list[tuple[str, tuple]]) -> list[object]:
        """One round: every sequence's call (``extend``, ``advance`` or ``extend_best_tokens``) at once."""
        self.pasts = [len(self.cached(index)) for index in range(self.count)]
        results = self._round(calls)
        for index, (call, result) in enumerate(zip(calls, results, strict=True)):
            self.logs[index].append(call)
            self.results[index].append(result)
        return results

    def extend(self, chains: list[list[int]], trees: list[DraftTree | None] | None = None) -> list[torch.Tensor]:
        """One round: sequence i extends by ``chains[i]`` (``trees[i]``'s nodes where given); each one's rows."""
        trees = trees or [None] * self.count
        return self.round([("extend", (list(chain), tree)) for chain, tree in zip(chains, trees, strict=True)])

    def last_rows(self, index: int) -> torch.Tensor:
        """The rows of sequence ``index``'s last extend."""
        return self.results[index][-1]

    def keep(self, kept: dict[int, list[int]]) -> None:
        """After a round, sequence i keeps only nodes ``kept[i]`` of its extend (the others keep all)."""
        self._keep(kept)
        for index, nodes in kept.items():
            self._log(index, "keep", self.pasts[index], list(nodes))

    def trim(self, lengths: dict[int, int]) -> None:
        """Sequence i keeps only its first ``lengths[i]`` tokens."""
        self._trim(lengths)
        for index, length in lengths.items():
            self._log(index, "trim", length)

    def reset(self, index: int) -> None:
        """Sequence ``index`` empties its cache; the others go on."""
        self._reset(index)
        self._log(index, "reset")

    def rewind_to(self, index: int, context: list[int]) -> list[int]:
        """``Session.rewind_to`` on sequence ``index``: trim to the prefix shared with ``context``."""
        left = self._rewind_to(index, context)
        self._log(index, "rewind_to", list(context), result=left)
        return left

    def _rewind_to(self, index: int, context: list[int]) -> list[int]:
        """The contract's own rewind, over sequence ``index``'s tokens and trim."""
        view = SimpleNamespace(cached=list(self.cached(index)), trim=lambda length: self._trim({index: length}))
        return Session.rewind_to(view, context)

    def _log(self, index: int, name: str, *arguments, result: object = None) -> None:
        self.logs[index].append((name, arguments))
        self.results[index].append(result)

    def close(self) -> None:
        """Free what the sequences hold."""

    def __enter__(self) -> "Together":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class SlotsTogether(Together):
    """One slot session per sequence over one shared model (``sessions``, ``batcher``: a subclass sets them);
    each round's calls run on the sequences' own threads, inside the batcher's requests, and decode in one
    batched step."""

    sessions: list[Session]
    batcher: object

    def cached(self, index):
        return self.sessions[index].cached

    def _round(self, calls):
        batcher = self.batcher
        steps, extends = batcher.steps, batcher.extends
        results, errors = [None] * self.count, []
        entered = threading.Barrier(self.count)

        def one(index):
            with batcher.request():
                try:
                    entered.wait(30)  # every sequence is in a request before any submits: one step takes them all
                    wait_for_turn(index)
                    name, arguments = calls[index]
                    results[index] = getattr(self.sessions[index], name)(*arguments)
                except BaseException as error:  # raised again on the test's thread
                    errors.append(error)

        def wait_for_turn(index):
            """Sequence i's extend joins the step i-th, so its cells take the same places in every run
            (where they lie changes llama.cpp's sums: fast numerics)."""
            deadline = time.monotonic() + 30
            while len(batcher._pending) + len(errors) < index:  # a sequence whose call raised submits nothing
                if time.monotonic() > deadline:
                    raise TimeoutError(f"sequence {index - 1} submitted no extend")
                time.sleep(0.0005)

        threads = [threading.Thread(target=one, args=(index,)) for index in range(self.count)]
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            batcher.step(0.05)
        if errors:
            raise errors[0]
        assert (batcher.steps - steps, batcher.extends - extends) == (1, self.count)  # decoded together
        return results

    def _keep(self, kept):
        for index, nodes in kept.items():
            self.sessions[index].keep(self.pasts[index], nodes)

    def _trim(self, lengths):
        for index, length in lengths.items():
            self.sessions[index].trim(length)

    def _reset(self, index):
        self.sessions[index].reset()

    def _rewind_to(self, index, context):
        return self.sessions[index].rewind_to(context)

    def close(self):
        for session in self.sessions:
            session.close()


class LlamaSlotsTogether(SlotsTogether):
    """One llama.cpp slot session per sequence in one shared context."""

    def __init__(self, gguf, count: int, n_ctx: int, wide_from: int = 0):
        from specplan.runtime.llama_cpp_shared import SharedModels

        super().__init__(count)
        self.models = SharedModels(count, n_ctx, threads=1)  # 1 thread: a shared 2-core box
        self.batcher = self.models.batcher
        self.sessions = [self.models(gguf, False, False, wide_from) for _ in range(count)]
        self.shared = self.sessions[0]._shared

    def positions(self, index: int) -> tuple[int, int]:
        """The lowest and highest position among the cells of sequence ``index``'s committed tokens."""
        llama, memory, sequence = self.shared.llama, self.shared.memory, self.sessions[index].committed
        return llama.llama_memory_seq_pos_min(memory, sequence), llama.llama_memory_seq_pos_max(memory, sequence)

    def close(self):
        super().close()
        self.models.close()


class TorchSlotsTogether(SlotsTogether):
    """One torch slot session per sequence over one network's batched cache (runtime/torch_shared.py)."""

    def __init__(self, model: torch.nn.Module, count: int):
        from specplan.runtime.torch_shared import SharedNetworks

        super().__init__(count)
        self.networks = SharedNetworks(count)
        self.batcher = self.networks.batcher
        self.sessions = [self.networks.session(model) for _ in range(count)]
        self.kv = self.sessions[0]._shared.kv  # the batched cache (runtime/batched_kv.py)


# ---- the backends ----------------------------------------------------------------------------------


@dataclass
class Backend:
    """A single-sequence session, how to decode several sequences of its model together, the token ids
    tests feed, and how closely rows must agree."""

    name: str
    alone: Session
    together: Callable[..., Together]  # together(count, n_ctx=...)
    text: list[int]  # at least 640 token ids
    loose: bool  # fast numerics: argmax up to near-ties, values within LOOSE_ATOL (else float32's 1e-4)

    def assert_rows(self, rows: torch.Tensor, expected: torch.Tensor) -> None:
        """The two logits blocks agree as closely as this backend's numerics allow."""
        assert rows.shape == expected.shape and rows.dtype == torch.float32
        if self.loose:
            assert argmax_divergences_are_near_ties(rows, expected)
            torch.testing.assert_close(rows, expected, atol=LOOSE_ATOL, rtol=0)
        else:
            torch.testing.assert_close(rows, expected, atol=1e-4, rtol=1e-4)

    def assert_best(self, best: list[int], expected: torch.Tensor) -> None:
        """``best`` is each row's argmax of ``expected``, or (fast numerics) differs only at near-ties."""
        top = expected.topk(2, dim=1).values
        for token, row, (first, second) in zip(best, expected, top.tolist(), strict=True):
            assert token == int(row.argmax()) or (self.loose and first - second < NEAR_TIE)


def torch_backend(attention: str) -> Backend:
    """A tiny random Llama: slot sessions' rows against a ``ModelSession``; pseudo-random ids of its vocab."""
    from specplan.runtime.session import ModelSession

    model = tiny_llama(attention)
    text = torch.randint(0, TINY_VOCAB, (640,), generator=torch.Generator().manual_seed(3)).tolist()
    return Backend(f"torch-{attention}", ModelSession(model, CPU), lambda count, n_ctx=0: TorchSlotsTogether(model, count),
                   text, loose=False)


def llama_cpp_backend() -> Backend:
    """Slot sessions of the default GGUF against a ``LlamaCppSession`` alone (fast numerics); English prose."""
    from specplan.runtime.llama_cpp_session import LlamaCppSession

    path = default_gguf_or_skip()
    alone = LlamaCppSession(path, n_ctx=512, threads=1, max_tree_paths=8, exact=False)
    return Backend("llama.cpp", alone, lambda count, n_ctx=256: LlamaSlotsTogether(path, count, n_ctx),
                   alone.tokenize(PROSE, True), loose=True)


@pytest.fixture(scope="module", params=["torch-eager", "torch-sdpa", "llama.cpp"])
def backend(request):
    made = llama_cpp_backend() if request.param == "llama.cpp" else torch_backend(request.param.split("-")[1])
    yield made
    if hasattr(made.alone, "close"):
        made.alone.close()


def prompts(backend: Backend, count: int) -> list[list[int]]:
    """A different prompt (the text from a different offset) for each of ``count`` sequences."""
    return [backend.text[offset:] for offset in OFFSETS[:count]]


def replay_alone(session: Session, log: list[tuple[str, tuple]]) -> list[object]:
    """Replay one sequence's calls on ``session`` from empty; what each returned. ``extend_best_tokens``
    is replayed as ``extend`` (its rows, whose argmax it should be: the contract)."""
    session.reset()
    results = []
    for name, arguments in log:
        results.append(getattr(session, "extend" if name == "extend_best_tokens" else name)(*arguments))
    return results


def assert_each_as_alone(backend: Backend, group: Together) -> None:
    """Every sequence's results, and the tokens it holds, equal those of one session replaying its calls alone."""
    for index in range(group.count):
        expected = replay_alone(backend.alone, group.logs[index])
        assert backend.alone.cached == group.cached(index), index
        for (name, _), got, want in zip(group.logs[index], group.results[index], expected, strict=True):
            if name == "extend":
                backend.assert_rows(got, want)
            elif name == "extend_best_tokens":
                backend.assert_best(got, want)
            else:
                assert got == want, (index, name)


# ---- (1) each sequence's chain rows are its rows alone ---------------------------------------------


@pytest.mark.parametrize("count", [2, 3])
def test_chain_rows_equal_each_sequence_alone(backend, count):
    """Sequences of different prompts, prefilled to different lengths together, then decoding greedily
    one token a round (each its own argmax) and by chains of different widths: each sequence's rows
    are those of a session fed the same chains alone."""
    texts = prompts(backend, count)
    with backend.together(count) as group:
        group.extend([text[:length] for text, length in zip(texts, (12, 40, 25))])
        for _ in range(GREEDY_STEPS):
            group.extend([[int(group.last_rows(index)[-1].argmax())] for index in range(count)])
        group.extend([text[60:60 + width] for text, width in zip(texts, (5, 1, 3))])
        group.extend([text[70:72] for text in texts])
        assert_each_as_alone(backend, group)


# ---- (2) no sequence sees another's tokens, before or after the other resets or trims -------------


@pytest.mark.parametrize("count", [2, 3])
def test_a_sequence_rows_do_not_depend_on_the_others(backend, count):
    """Sequence 0 prefills, resets onto a new prompt and trims, while the others decode on: the
    others' rows (before and after sequence 0's reset and trim) are those they get alone, and so are
    sequence 0's after its reset (a fresh prompt's) and after its trim."""
    texts, fresh = prompts(backend, count), backend.text[FRESH:]
    with backend.together(count) as group:
        group.extend([text[:length] for text, length in zip(texts, (40, 12, 25))])
        group.extend([text[50:54] for text in texts])
        group.reset(0)
        assert group.cached(0) == [] and group.cached(1) == texts[1][:12] + texts[1][50:54]
        group.extend([fresh[:20]] + [text[54:57] for text in texts[1:]])
        group.extend([fresh[20:26]] + [text[57:58] for text in texts[1:]])
        group.trim({0: 22})
        group.extend([fresh[30:33]] + [text[58:62] for text in texts[1:]])
        group.extend([fresh[33:34]] + [text[62:63] for text in texts[1:]])
        assert_each_as_alone(backend, group)


def rounds_beside(group: Together, mine: list[int], others: list[list[int]]) -> list[torch.Tensor]:
    """Sequence 0 decodes ``mine`` (a prefill, a tree kept along a path, chains) while sequence i > 0
    decodes ``others[i - 1]``: a tree kept along a path, a chain kept in part, a trim, a reset (the
    last sequence); sequence 0's rows."""
    rest = group.count - 1
    nodes = [mine[40]] + mine[45:45 + len(PARENTS) - 1]
    group.extend([mine[:40]] + [other[:length] for other, length in zip(others, (12, 25))])
    group.extend([nodes] + [other[30:30 + len(DEPTH_FIRST)] for other in others],
                 [DraftTree(PARENTS, torch.tensor(nodes))]
                 + [DraftTree(DEPTH_FIRST, torch.tensor(other[30:30 + len(DEPTH_FIRST)])) for other in others])
    group.keep({0: [0, 2, 6, 8]} | {index: [0, 4, 5] for index in range(1, group.count)})
    group.extend([mine[60:63]] + [other[40:44] for other in others])
    group.keep({1: [0, 1]})
    group.trim({1: 10})
    group.reset(rest)
    group.extend([mine[63:68]] + [other[50:53] for other in others])
    return [rows for (name, _), rows in zip(group.logs[0], group.results[0], strict=True) if name == "extend"]


@pytest.mark.parametrize("count", [2, 3])
def test_a_sequence_rows_do_not_depend_on_the_others_tokens(backend, count):
    """The same rounds twice, the other sequences fed different tokens the second time in the same
    counts (every decode the same shape): sequence 0's rows are the same bit for bit, so nothing of
    the others' tokens reaches them, through their trees, keeps, trims and resets too."""
    mine = backend.text[FRESH:]
    runs = []
    for offsets in (OFFSETS[1:count], (500, 570)[:count - 1]):
        with backend.together(count) as group:
            runs.append(rounds_beside(group, mine, [backend.text[offset:] for offset in offsets]))
    for got, again in zip(*runs, strict=True):
        assert torch.equal(got, again)


# ---- (3) keep, trim and rewind on one sequence leave the other's rows as they were ------------------


def test_keep_trim_and_rewind_on_one_sequence_leave_the_other_unchanged(backend):
    """One sequence's tree kept along a path, chain kept in part, trim and rewind, while the other
    extends chains (then the other way round, a tree on the second): every row of both, the
    other's after each edit included, is the row it gets alone."""
    first, second = prompts(backend, 2)
    with backend.together(2) as group:
        group.extend([first[:40], second[:30]])
        nodes = [first[40]] + first[45:45 + len(PARENTS) - 1]
        group.extend([nodes, second[30:34]], [DraftTree(PARENTS, torch.tensor(nodes)), None])
        group.keep({0: [0, 2, 6, 8]})
        branches = second[34:34 + len(DEPTH_FIRST)]
        group.extend([first[60:63], branches], [None, DraftTree(DEPTH_FIRST, torch.tensor(branches))])
        group.keep({1: [0, 4, 5]})
        group.extend([first[63:69], second[40:42]])
        group.keep({0: [0, 1, 2]})
        assert group.cached(0) == first[:40] + [nodes[0], nodes[2], nodes[6], nodes[8]] + first[60:66]
        assert group.cached(1) == second[:34] + [branches[0], branches[4], branches[5]] + second[40:42]
        group.trim({0: len(group.cached(0)) - 2})
        group.extend([first[70:71], second[42:45]])
        left = group.rewind_to(0, group.cached(0)[:-1] + first[80:83])
        assert left == first[80:83]
        group.extend([left, second[45:46]])
        group.trim({1: len(group.cached(1)) - 3})
        group.extend([first[83:85], second[50:52]])
        assert_each_as_alone(backend, group)


# ---- (4) a reset frees the sequence's cache and no other's ------------------------------------------


def test_llama_cpp_reset_frees_the_slot_cells(backend):
    """With the shared cache all but full, one slot's reset frees its cells and no other slot's: the
    slot then takes a new prompt longer than the cells left free (it fits only in the freed ones), and
    both slots' rows are those alone. The prefills together pass BATCH (512) tokens: one step, two
    llama_decode calls, the second slot's rows split between them."""
    if backend.name != "llama.cpp":
        pytest.skip("llama.cpp slot cells")
    first, second = prompts(backend, 2)
    cells = 384  # llama.cpp rounds a context up to a multiple of 256 cells: 2 * 384 needs none
    with backend.together(2, n_ctx=cells) as group:
        assert group.shared.llama.llama_n_ctx(group.shared.context) == 2 * cells
        group.extend([first[:cells - 4], second[:cells - 8]])  # 12 cells left free
        group.reset(0)
        assert group.positions(0) == (-1, -1) and group.positions(1) == (0, cells - 9)
        group.extend([backend.text[FRESH:FRESH + 40], second[cells - 8:cells - 4]])
        assert group.positions(0) == (0, 39) and group.positions(1) == (0, cells - 5)
        assert_each_as_alone(backend, group)


def test_torch_reset_frees_the_sequence_slots(backend):
    """A batched cache's sequence trimmed to nothing (its reset) gives back its slots: the cache
    shrinks to the other sequence's length, whose rows go on as alone, and the reset sequence takes
    a new prompt as a fresh one. A session closed (a finished request) gives back its row's slots too,
    and the one left goes on as alone while the closed row idles."""
    if not backend.name.startswith("torch"):
        pytest.skip("torch batched cache slots")
    first, second = prompts(backend, 2)
    with backend.together(2) as group:
        group.extend([first[:40], second[:12]])
        group.reset(0)
        assert group.kv.lengths() == [0, 12] and group.kv.slots == 12 and group.kv.cache.get_seq_length() == 12
        group.extend([backend.text[FRESH:FRESH + 5], second[12:15]])
        assert group.kv.lengths() == [5, 15]
        assert_each_as_alone(backend, group)
        group.sessions[0].close()
        assert group.kv.lengths() == [0, 15] and group.kv.slots == 15
        rows = group.sessions[1].extend(second[15:18])
        assert group.kv.lengths() == [0, 18] and group.kv.slots == 18  # the free row took no part
    backend.alone.reset()
    backend.alone.extend(second[:15])
    backend.assert_rows(rows, backend.alone.extend(second[15:18]))


# ---- llama.cpp: slots that read their rows differently share one step -----------------------------


def test_advance_extend_and_best_tokens_share_a_step(backend):
    """In one batched step one slot advances (no rows), one extends (every row) and one takes best
    tokens (each row's argmax; llama.cpp reads it in its own buffer): each gets what its session alone
    gives, and so does the next round, whose cache the step filled. Then a step of advances only (on
    torch the LM head then runs for each row's last token alone) leaves the cache as extends do."""
    texts = prompts(backend, 3)
    with backend.together(3) as group:
        assert group.round([("advance", (texts[0][:30],)), ("extend", (texts[1][:20],)),
                            ("extend_best_tokens", (texts[2][:25],))])[0] is None
        group.round([("extend_best_tokens", (texts[0][30:33],)), ("advance", (texts[1][20:24],)),
                     ("extend", (texts[2][25:29],))])
        group.extend([text[40:43] for text in texts])
        assert_each_as_alone(backend, group)
        group.round([("advance", (text[43:50 + 3 * index],)) for index, text in enumerate(texts)])
        group.extend([text[50 + 3 * index:53 + 3 * index] for index, text in enumerate(texts)])
        assert_each_as_alone(backend, group)


# ---- (6) long chains on the shared wide copy ---------------------------------------------------------

WIDE_FROM = 8


def test_llama_cpp_slots_decode_long_chains_on_the_shared_unrepacked_copy():
    """With a wide copy (runtime/llama_cpp_shared.py ``SharedContext.wide``), chain extends of ``WIDE_FROM``
    tokens or more decode in the context over the unrepacked weights, each slot's committed sequence copied
    between the two contexts when one lags; in one step a wide extend of one sequence and a short one of
    another decode each in its context. Each sequence's rows, through a prefill, plain rounds, a chain kept
    in part and a trim, are those of a session alone with its own wide copy (fast numerics)."""
    from specplan.runtime.llama_cpp_session import LlamaCppSession, repacks_weights

    path = default_gguf_or_skip()
    if not repacks_weights(False):
        pytest.skip("llama.cpp does not repack weights on this CPU (AMX): there is no wide copy")
    alone = LlamaCppSession(path, n_ctx=512, threads=1, max_tree_paths=8, exact=False, wide_from=WIDE_FROM)
    backend = Backend("llama.cpp-wide", alone, lambda count, n_ctx=256: LlamaSlotsTogether(path, count, n_ctx, WIDE_FROM),
                      alone.tokenize(PROSE, True), loose=True)
    first, second = prompts(backend, 2)
    try:
        with backend.together(2) as group:
            group.extend([first[:40], second[:12]])  # both prefills wide
            group.extend([[int(group.last_rows(index)[-1].argmax())] for index in range(2)])  # both copied back
            group.extend([first[50:60], second[50:53]])  # one wide, one not: two contexts in one step
            group.keep({0: [0, 1, 2, 3]})  # the wide chain kept in part: trimmed in both contexts
            group.extend([first[60:61], second[53:63]])
            group.trim({1: 20})
            group.extend([first[61:70], second[20:30]])
            assert all(session.copies >= 2 for session in group.sessions)  # the wide context was used both ways
            assert_each_as_alone(backend, group)
    finally:
        alone.close()


def test_a_shared_context_over_weights_left_unrepacked_keeps_no_wide_copy():
    """Where the weights are not repacked (``repack=False``; on a CPU with AMX, where llama.cpp's repacking
    dies in llama_decode, by default) the shared context already verifies on the file's own layout: no second
    copy, whatever ``wide_from`` the plan asks."""
    from specplan.runtime.batcher import Batcher
    from specplan.runtime.llama_cpp_shared import SharedContext

    shared = SharedContext(default_gguf_or_skip(), 1, 64, 1, Batcher(), wide_from=WIDE_FROM, repack=False)
    try:
        assert shared.wide is None and shared.wide_from == 0
    finally:
        shared.close()

"""On llama.cpp, T(n) is timed right after an untimed forward of the same width (llama.cpp reuses
its compute graph between decodes of one shape, as a run of equal rounds does); elsewhere not."""

from __future__ import annotations

import pytest
import torch

from specplan.profiler.latency import measure_latency
from specplan.runtime.backend import Session


class RecordingSession(Session):
    """A session that records the width of every forward after the context, and which were timed."""

    def __init__(self, backend: str):
        self.backend = backend
        self.device = torch.device("cpu")
        self.cached: list[int] = []
        self.widths: list[int] = []

    def reset(self) -> None:
        self.cached = []

    def trim(self, length: int) -> None:
        self.cached = self.cached[:length]

    def extend(self, tokens, tree=None) -> torch.Tensor:
        if self.cached:  # not the context itself
            self.widths.append(len(tokens))
        self.cached = self.cached + list(tokens)
        return torch.zeros(len(tokens), 4)

    def keep(self, past_length: int, nodes) -> None:
        self.cached = self.cached[:past_length + len(nodes)]


@pytest.mark.parametrize("backend", ["llama.cpp", "torch"])
def test_each_timed_width_follows_one_of_its_own_width_on_llama_cpp(backend):
    session = RecordingSession(backend)
    curve = measure_latency(session, torch.device("cpu"), list(range(10)), widths=(1, 2, 4), repeats=3)
    assert curve.n == (1, 2, 4) and session.cached == list(range(10))
    warm_up, timed_passes = session.widths[:3], session.widths[3:]
    assert warm_up == [1, 2, 4]
    if backend == "llama.cpp":
        assert timed_passes == [1, 1, 2, 2, 4, 4] * 3  # an untimed forward of the same width before each timed one
    else:
        assert timed_passes == [1, 2, 4] * 3

"""The n-gram index gives prompt lookup's answer (the scan of ``lookup_continuation``) at every
step of a growing context, across prompts and after going back to a shorter context."""

from __future__ import annotations

import random

import pytest

from specplan.runtime.drafters.ngram import NgramIndex, lookup_continuation


@pytest.mark.parametrize("seed", range(20))
def test_the_index_answers_as_the_scan_does(seed):
    rng = random.Random(seed)
    max_ngram = rng.randint(1, 5)
    index = NgramIndex(max_ngram)
    for _ in range(3):  # three prompts, one index
        text = [rng.randint(0, rng.choice([3, 8, 50])) for _ in range(rng.randint(1, 120))]
        size = 1
        while size <= len(text):
            context = text[:size]
            length = rng.randint(1, 8)
            assert index.continuation(context, length) == lookup_continuation(context, max_ngram, length)
            size += rng.choice([1, 1, 2, 5]) if rng.random() > 0.1 else -min(size - 1, rng.randint(1, 10))


def test_a_changed_context_of_the_same_length_is_not_read_from_the_old_index():
    index = NgramIndex(2)
    assert index.continuation([1, 2, 3, 1, 2], 2) == (3, 1)
    assert index.continuation([4, 2, 9, 4, 2], 2) == (9, 4)

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
    min_ngram = rng.randint(1, max_ngram)
    index = NgramIndex(max_ngram, min_ngram)
    for _ in range(3):  # three prompts, one index
        text = [rng.randint(0, rng.choice([3, 8, 50])) for _ in range(rng.randint(1, 120))]
        size = 1
        while size <= len(text):
            context = text[:size]
            length = rng.randint(1, 8)
            assert index.continuation(context, length) == lookup_continuation(context, max_ngram, length, min_ngram)
            size += rng.choice([1, 1, 2, 5]) if rng.random() > 0.1 else -min(size - 1, rng.randint(1, 10))


def test_a_changed_context_of_the_same_length_is_not_read_from_the_old_index():
    index = NgramIndex(2)
    assert index.continuation([1, 2, 3, 1, 2], 2) == (3, 1)
    assert index.continuation([4, 2, 9, 4, 2], 2) == (9, 4)


def test_a_minimum_key_length_drafts_nothing_on_a_shorter_match():
    text = [1, 2, 3, 4, 9, 2, 3]  # "2 3" recurs, "9 2 3" does not
    assert lookup_continuation(text, 3, 2) == (4, 9)
    assert lookup_continuation(text, 3, 2, min_ngram=2) == (4, 9)
    assert lookup_continuation(text, 3, 2, min_ngram=3) == ()
    assert NgramIndex(3, 3).continuation(text, 2) == ()
    assert NgramIndex(3, 2).continuation(text, 2) == (4, 9)

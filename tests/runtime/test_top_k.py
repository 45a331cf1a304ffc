"""The block top-k (runtime/top_k.py) gives torch.topk's values, and its indices wherever values
are distinct, on every vocabulary shape it takes and the ones it hands back to torch.topk."""

import pytest
import torch

from specplan.runtime.top_k import top_logits


@pytest.mark.parametrize("vocab", [49152, 151936, 4096, 96, 1000, 997])
@pytest.mark.parametrize("rows", [1, 4, 9])
def test_matches_torch_topk_on_distinct_values(vocab, rows):
    generator = torch.Generator().manual_seed(vocab + rows)
    logits = torch.randn(rows, vocab, generator=generator)
    for count in (1, 2, 8):
        values, indices = top_logits(logits, count)
        expected = torch.topk(logits, count, dim=-1)
        assert torch.equal(values, expected.values)
        assert torch.equal(indices, expected.indices)


def test_all_top_entries_in_one_block():
    # the 8 largest logits sit side by side in one block: the block method must still find all 8
    logits = torch.zeros(4, 4096)
    logits[0, 130:138] = torch.arange(8.0) + 1
    logits[1, 4088:4096] = -torch.arange(8.0) + 10
    values, indices = top_logits(logits, 8)
    assert indices[0].tolist() == list(range(137, 129, -1))
    assert indices[1].tolist() == list(range(4088, 4096))
    assert indices.shape == (4, 8)
    assert torch.equal(values, torch.topk(logits, 8, dim=-1).values)


def test_ties_keep_values_and_point_at_them():
    logits = torch.zeros(4, 1024)
    logits[:, [5, 300, 700, 1000]] = 3.0
    values, indices = top_logits(logits, 3)
    assert values.tolist() == [[3.0, 3.0, 3.0]] * 4
    for row in indices.tolist():
        assert set(row) <= {5, 300, 700, 1000} and len(set(row)) == 3


def test_count_above_vocabulary_is_capped_and_bf16_rows_work():
    logits = torch.randn(2, 64, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    values, indices = top_logits(logits, 100)
    assert values.shape == (2, 64)
    assert torch.equal(values, torch.topk(logits, 64, dim=-1).values)
    assert sorted(indices[0].tolist()) == list(range(64))

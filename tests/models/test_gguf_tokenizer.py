"""The tokenizer a GGUF file carries, kept in the cache after its first (slow) build: the cached one
tokenizes, detokenizes and formats chats as the one built from the file; an unwritable cache falls back
to the file. (A damaged entry is rebuilt: tests/models/test_cache_entry.py.)"""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from specplan.core.errors import SpecplanError
from specplan.models.cache_entry import MANIFEST
from specplan.models.load import default_gguf_path, gguf_tokenizer

TEXTS = ["def add(a, b):\n    return a + b\n", "Translate 'héllo wörld' to French. 中文?", "  spaces\t\ttabs\n\n"]
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a prime."}]


@pytest.fixture(scope="module")
def gguf():
    try:
        return default_gguf_path()
    except SpecplanError as error:
        pytest.skip(str(error))


@pytest.fixture(scope="module")
def expected(gguf):
    """The tokenizer transformers builds from the file (5 s)."""
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


def assert_same_tokenizer(found, expected) -> None:
    for text in TEXTS:
        assert found(text)["input_ids"] == expected(text)["input_ids"]
        ids = expected(text)["input_ids"]
        assert found.decode(ids, skip_special_tokens=True) == expected.decode(ids, skip_special_tokens=True)
    assert found.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False) == \
        expected.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
    assert (found.eos_token_id, found.bos_token_id, len(found)) == (expected.eos_token_id, expected.bos_token_id, len(expected))
    assert found.all_special_ids == expected.all_special_ids


@pytest.mark.realmodel
def test_the_cached_tokenizer_is_the_files(gguf, expected, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECPLAN_CACHE", str(tmp_path))
    first = gguf_tokenizer(gguf)  # builds the entry
    (entry,) = [path for path in (tmp_path / "tokenizers").iterdir() if not path.name.startswith(".")]
    assert (entry / MANIFEST).is_file()
    assert_same_tokenizer(first, expected)
    assert_same_tokenizer(gguf_tokenizer(gguf), expected)  # read from the entry


@pytest.mark.realmodel
def test_an_unwritable_cache_reads_the_tokenizer_from_the_file(gguf, expected, tmp_path, monkeypatch):
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    monkeypatch.setenv("SPECPLAN_CACHE", str(blocked))
    assert_same_tokenizer(gguf_tokenizer(gguf), expected)

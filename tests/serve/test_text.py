"""Committed tokens -> the text a client receives (serve/text.py), with a byte-level tokenizer whose
tokens may end inside a UTF-8 character, as byte-fallback tokenizers' do."""

from __future__ import annotations

import pytest

from specplan.serve.text import TextStream


class Bytes:
    """Token i is byte i; an unfinished character decodes to U+FFFD, as real tokenizers do."""

    def decode(self, ids, skip_special_tokens=True):
        return bytes(ids).decode("utf-8", errors="replace")


def stream_of(text: str, stops=(), step: int = 1) -> tuple[list[str], TextStream]:
    data = list(text.encode())
    stream = TextStream(Bytes(), stops)
    deltas = [stream.add(data[start:start + step]) for start in range(0, len(data), step)]
    deltas.append(stream.finish())
    return deltas, stream


@pytest.mark.parametrize("step", [1, 2, 3, 7])
def test_characters_split_across_tokens_are_sent_whole(step):
    text = "naïve café — 東京 🚀 done"
    deltas, stream = stream_of(text, step=step)
    assert "".join(deltas) == text and not any("\ufffd" in delta for delta in deltas)
    assert not stream.stopped


@pytest.mark.parametrize("stops, expected", [
    (("STOP",), "one two "),               # found across tokens
    (("two", "one"), ""),                   # the earliest of several wins, even at the very start
    (("STOPPED",), "one two STOP three"),   # a stop string's start that never completes is sent at the end
    (("é",), "one two STOP three"),         # a multi-byte stop string that never occurs
])
def test_the_text_ends_before_the_first_stop_string(stops, expected):
    deltas, stream = stream_of("one two STOP three", stops)
    assert "".join(deltas) == expected == stream.text
    assert stream.stopped == (expected != "one two STOP three")


def test_nothing_is_sent_after_a_stop():
    stream = TextStream(Bytes(), ("\n",))
    assert stream.add(list(b"line one\nline two")) == "line one"
    assert stream.add(list(b" more")) == "" and stream.finish() == ""

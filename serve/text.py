"""Committed token ids -> the text a client receives: decoded as a whole (a token may end inside a
UTF-8 character or a word), sent only once it can no longer change, and cut before the first of the
request's stop strings (which OpenAI's API leaves out of the answer)."""

from __future__ import annotations

from collections.abc import Sequence

REPLACEMENT = "\ufffd"  # what a tokenizer decodes an unfinished UTF-8 character to


class TextStream:
    """The text of the tokens given to :meth:`add` so far; each call returns the part that is final.

    >>> class Letters:  # a tokenizer whose token i is the letter chr(i)
    ...     def decode(self, ids, skip_special_tokens=True): return "".join(map(chr, ids))
    >>> stream = TextStream(Letters(), ("END",))
    >>> stream.add([ord(c) for c in "abcE"]), stream.add([ord(c) for c in "Nx"]), stream.add([ord(c) for c in "ENDz"])
    ('abc', 'ENx', '')
    >>> stream.stopped, stream.text
    (True, 'abcENx')
    """

    def __init__(self, tokenizer, stops: Sequence[str] = ()):
        self.tokenizer = tokenizer
        self.stops = tuple(stops)
        self.ids: list[int] = []
        self.sent = 0  # characters already returned
        self.stopped = False  # a stop string was found: the text ends before it
        self.text = ""  # the final text so far (all of it once finished)

    def add(self, tokens: Sequence[int]) -> str:
        """The new final text after ``tokens`` (empty once stopped)."""
        if self.stopped:
            return ""
        self.ids.extend(tokens)
        decoded = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        cut = self._stop_at(decoded)
        if cut is not None:
            self.stopped = True
            return self._send(decoded[:cut])
        return self._send(decoded[:len(decoded) - self._held(decoded)])

    def finish(self) -> str:
        """The text held back at the end (a partial stop string that never completed)."""
        if self.stopped:
            return ""
        return self._send(self.tokenizer.decode(self.ids, skip_special_tokens=True))

    def _send(self, final: str) -> str:
        delta = final[self.sent:]
        self.sent = max(self.sent, len(final))
        self.text = final if len(final) >= len(self.text) else self.text
        return delta

    def _stop_at(self, decoded: str) -> int | None:
        """Where the first stop string starts, searching only text not yet sent plus its overlap."""
        longest = max((len(stop) for stop in self.stops), default=0)
        begin = max(0, self.sent - longest + 1)
        found = [index for stop in self.stops if (index := decoded.find(stop, begin)) >= 0]
        return min(found) if found else None

    def _held(self, decoded: str) -> int:
        """Characters at the end that may still change: an unfinished character, or a stop string's start."""
        held = len(decoded) - len(decoded.rstrip(REPLACEMENT))
        body = decoded[:len(decoded) - held]
        for stop in self.stops:
            for size in range(min(len(stop) - 1, len(body)), 0, -1):
                if body.endswith(stop[:size]):
                    held = max(held, len(decoded) - len(body) + size)
                    break
        return held

"""The round commit: what one request keeps of each round's tokens (budget cap, EOS cut, counts).

Every loop that commits rounds (the engine, the adaptive engine, a hierarchy's middle model
drafting for the stage above, each sequence of a batch) commits through :class:`Committed`, so
the rules live in one place: a round's chunk (accepted draft tokens and the bonus) is cut to the
tokens the request still wants, then just after the first end-of-sequence token; what is left is
appended, and its length counted as that forward's committed tokens (Spec-Bench's accepted
length counts the bonus).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


@dataclass
class Committed:
    """One request's committed text: ``context`` (the prompt, then every new token) and its counts.

    >>> text = Committed([1, 2], max_new_tokens=4, eos_ids=frozenset({9}))
    >>> text.add([5, 6, 7]), text.add([8, 9, 4]), text.new, text.stop_reason
    ([5, 6, 7], [8], [5, 6, 7, 8], 'max_new_tokens')
    >>> text = Committed([1], 8, frozenset({9})); text.add([5, 9, 4]), text.stop_reason, text.done
    ([5, 9], 'eos', True)
    """

    context: list[int]
    max_new_tokens: int
    eos_ids: Iterable[int] = frozenset()
    new: list[int] = field(default_factory=list)
    per_forward: list[int] = field(default_factory=list)  # tokens committed by each round, bonus included
    stop_reason: str = ""  # "" while running, then eos | max_new_tokens | stop (the caller's, :meth:`stop`)

    def __post_init__(self) -> None:
        self.context = list(self.context)
        self.eos_ids = frozenset(self.eos_ids)

    @property
    def remaining(self) -> int:
        """Tokens the request still wants."""
        return self.max_new_tokens - len(self.new)

    @property
    def done(self) -> bool:
        return bool(self.stop_reason)

    def add(self, chunk: Sequence[int]) -> list[int]:
        """Commit one round's ``chunk`` (cut to the budget, then after its first EOS); return what was kept."""
        chunk = list(chunk[: self.remaining])
        for index, token in enumerate(chunk):
            if token in self.eos_ids:
                chunk, self.stop_reason = chunk[: index + 1], "eos"
                break
        self.context.extend(chunk)
        self.new.extend(chunk)
        self.per_forward.append(len(chunk))
        if not self.stop_reason and self.remaining <= 0:
            self.stop_reason = "max_new_tokens"
        return chunk

    def stop(self) -> None:
        """End the request here (a caller's stop string was committed); the rounds stop after this one."""
        self.stop_reason = self.stop_reason or "stop"

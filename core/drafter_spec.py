"""Parse ``--drafter SPEC`` strings (docs/formats.md) into a kind, an argument and a stable id.

Kinds: ``model:MODEL`` (a smaller model sharing the tokenizer), ``head:DIR`` (a draft head
over the target's hidden states, made by ``specplan distill --kind head``; EAGLE, arXiv
2401.15077), ``layerskip:K`` or
``layerskip:0,2,4`` (self-speculation on the target's layers), ``ngram:N`` / ``ngram:N:K`` (prompt
lookup with keys of N tokens down to 1, or down to K),
``recycle`` (Token Recycling, arXiv 2408.08696) and ``cache`` (Cacheback, arXiv 2511.21699),
retrieval tables that take no argument. No torch here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from specplan.core.errors import DrafterSpecError

KINDS = ("model", "head", "layerskip", "ngram", "recycle", "cache")
RUNNABLE = KINDS
RETRIEVAL_KINDS = ("ngram", "recycle", "cache")


@dataclass(frozen=True)
class DrafterSpec:
    kind: str
    argument: str
    source: str  # the spec as written

    @property
    def id(self) -> str:
        if self.kind == "ngram":
            return "ngram-" + self.argument.replace(":", "-")
        if self.kind == "layerskip":
            return "layerskip-" + self.argument.replace(",", "-").replace(" ", "")
        if self.kind in ("model", "head"):
            stem = Path(self.argument.rstrip("/")).name or self.argument
            return f"{self.kind}-" + re.sub(r"[^A-Za-z0-9._-]+", "-", stem.removesuffix(".gguf"))
        return self.kind

    @property
    def ngram_sizes(self) -> tuple[int, int]:
        """``ngram:N`` -> (N, 1): lookup keys of N tokens down to 1; ``ngram:N:K`` -> (N, K): down to K
        only, so a round drafts nothing unless the last K tokens recur (llama-server's
        ``ngram-simple`` is ``ngram:K:K``).

        >>> parse_drafter_spec("ngram:5").ngram_sizes, parse_drafter_spec("ngram:12:4").ngram_sizes
        ((5, 1), (12, 4))
        """
        longest, _, shortest = self.argument.partition(":")
        return int(longest), int(shortest or 1)

    @property
    def is_retrieval(self) -> bool:
        return self.kind in RETRIEVAL_KINDS


def _check_layers(spec: str, argument: str) -> None:
    """``K`` (first K layers, K >= 1) or a list of distinct layer indices."""
    if not re.fullmatch(r"\d+(,\d+)*", argument):
        raise DrafterSpecError(f"drafter spec {spec!r}: use layerskip:K (first K layers) or layerskip:0,2,4")
    layers = [int(part) for part in argument.split(",")]
    if len(layers) == 1 and layers[0] < 1:
        raise DrafterSpecError(f"drafter spec {spec!r}: K must be at least 1 layer, e.g. layerskip:20")
    if len(set(layers)) != len(layers):
        raise DrafterSpecError(f"drafter spec {spec!r} lists a layer twice; list each layer once, e.g. layerskip:0,2,4")


MAX_NGRAM = 16  # tokens of a lookup key


def _check_ngram(spec: str, argument: str) -> None:
    """``N`` or ``N:K``, 1 <= K <= N <= MAX_NGRAM."""
    match = re.fullmatch(r"(\d+)(?::(\d+))?", argument)
    longest, shortest = (int(match.group(1)), int(match.group(2) or 1)) if match else (0, 0)
    if not 1 <= shortest <= longest <= MAX_NGRAM:
        raise DrafterSpecError(f"drafter spec {spec!r}: use ngram:N (keys of N tokens down to 1) or ngram:N:K "
                               f"(down to K), 1 <= K <= N <= {MAX_NGRAM}, e.g. ngram:3 or ngram:12:4")


def parse_drafter_spec(spec: str) -> DrafterSpec:
    """Parse one SPEC; raise DrafterSpecError with the accepted forms otherwise.

    >>> parse_drafter_spec("ngram:3").id
    'ngram-3'
    >>> parse_drafter_spec("layerskip:0,2,4").id
    'layerskip-0-2-4'
    >>> parse_drafter_spec("recycle").id, parse_drafter_spec("cache").is_retrieval
    ('recycle', True)
    """
    kind, _, argument = spec.partition(":")
    kind = kind.strip()
    usage = "use model:MODEL, head:DIR, layerskip:K, layerskip:0,2,4,..., ngram:N, ngram:N:K, recycle or cache"
    if kind not in KINDS:
        raise DrafterSpecError(f"unknown drafter spec {spec!r}; {usage}")
    if kind not in RUNNABLE:
        raise DrafterSpecError(f"drafter {kind!r} is not available in this version of specplan yet; {usage}")
    if kind == "ngram":
        _check_ngram(spec, argument.replace(" ", ""))
    elif kind == "layerskip":
        _check_layers(spec, argument.replace(" ", ""))
    elif kind in ("recycle", "cache"):
        if argument or ":" in spec:
            raise DrafterSpecError(f"drafter spec {spec!r}: {kind} takes no argument; write just `{kind}`")
    elif kind == "head" and not argument:
        raise DrafterSpecError(f"drafter spec {spec!r} names no directory; use head:DIR (made by `specplan distill --kind head`)")
    elif not argument:
        raise DrafterSpecError(f"drafter spec {spec!r} names no model; use model:PATH_OR_ID")
    return DrafterSpec(kind, argument.replace(" ", ""), spec)

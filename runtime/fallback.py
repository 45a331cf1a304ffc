"""Speculation that stops paying stops: each round is played by the plan's stage or by plain
decoding, whichever the request's own measured cost per committed token says is cheaper
(docs/planner-math.md section 12.5).

The plan was solved from calibration prompts; a request may not be like them (a chat prompt
under a plan calibrated on edits: the lookup drafts, the target rejects, every round verifies
1 + gamma tokens to commit one). The guard keeps two running costs within each request, seconds
per committed token of the plan's rounds (draft and verify) and of plain rounds (one token each),
and plays plain decoding while the plan's recent rounds cost more per token than plain ones. Plain
decoding is measured by the plan's rounds that drafted nothing (a lookup without a match decodes one
token, as plain decoding does; they are no evidence for or against the plan and stay out of its
window, though they count towards the rounds its first judgement waits for) and, where there are none
yet, by a few plain rounds after the plan's first rounds, unless the plan's own
verifies, scaled by the profile's T(1) / T(n), show it winning by far (``SURE_WIN``). It returns to the
plan after a back-off of plain tokens that doubles each time the plan fails again (16, 32, ...,
256), and probes it for ``PROBE_ROUNDS`` rounds, so a request whose text turns copyable
(an edit reprinting its input after a preamble) finds the speculation again. A lookup's chain is
shortened before it is given up: where the plan's window loses, the guard re-costs the window's own
rounds at every shorter chain (each round's draft cut there, its verify scaled by the profile's
T(n), a copy longer than the chain split over several rounds) and plays the cheapest one that beats
plain decoding, if any (``shorter_chain``); a chain accepted whole still doubles back up.

Lossless: which stage plays round k depends only on the rounds before it (their committed
tokens and measured seconds), never on round k's draft or random draws. Every round is an
ordinary stage round, lossless whatever drafted it (section 5), and both stages share the
target's session, whose invariant (every committed token but the last is cached) holds after
any round. So greedy output is the target's greedy decoding and sampled output is distributed as
the target's, exactly as with the adaptive engine's switches (runtime/adaptive.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from specplan.core.limits import LONGEST_LOOKUP_CHAIN, grown_chain

PROBE_ROUNDS = 4  # plan rounds measured before the guard compares (and after each back-off)
WINDOW_ROUNDS = 8  # the plan's cost is the sum over its last this many rounds
FIRST_BACKOFF = 16  # plain tokens played after the plan first loses; doubles on each loss
LAST_BACKOFF = 256
PLAIN_PROBE = 3  # plain rounds that measure plain decoding in each request (three: their median is one of them)
# Lookup chains grow only where the longest chains' verifies cost a token at most this share of the plan's
# chain's (ChainGrowth). Set between the two models measured (docs/results.md, "Never slower than
# llama.cpp"): 0.43-0.52 on the 1.5B, where growth paid, 0.78-0.81 on SmolLM2, where it lost.
GROWTH_GAIN = 0.6
# A fresh match's first chain (ChainGrowth.first) verifies in at most this many plain tokens' time, so that a
# coincidental match costs about five plain tokens instead of twelve. Replayed over the pair's greedy answers on
# the home EPYC's T(n) (measurements/first_chain.py, docs/planner-math.md section 12.5), the chain this gave
# (16) took Spec-Bench from 0.940x to 0.977x of plain decoding, cost HumanEval 4% (2.36x against 2.46x) and
# left humaneval-edit as it was (2.09x against 2.08x). With T read as steps between profiled widths
# (planner/latency.py) it gives 15, a verify of 16 tokens: 146-156 ms there against 177 for 17.
FIRST_CHAIN_PLAIN_TOKENS = 6
# Of the chains within that budget, the first chain is the shortest whose verify costs a token at most this
# much more than the cheapest one's: where T(n) / n is flat past a few tokens (SmolLM2: T(8) / 8 within 8% of
# T(12) / 12) a copy loses little on its first round by the shorter chain, and a coincidental match costs
# T(8) instead of T(12). Replayed with the match gate over SmolLM2's greedy answers on the home EPYC
# (measurements/first_chain.py --gate), a first chain of 7 against 11 took Spec-Bench from 1.006x to 1.021x,
# humaneval-edit from 1.288x to 1.299x and HumanEval from 1.130x to 1.134x; on the pair's steep curve no
# chain is within 10% of 15's.
FIRST_CHAIN_KNEE = 1.1
# No plain rounds are played to measure plain decoding while the plan's window costs at most this share of
# plain decoding as estimated from the plan's own verifies and the profile's T(1) / T(n) (FallbackGuard):
# an aligned prediction or copy commits tens of tokens a round, and a plain round then only costs. Half,
# so that the estimate may be off by 2x (the profile's curve from another CPU) and the plan still pays.
SURE_WIN = 0.5


@dataclass(frozen=True)
class GuardSettings:
    """The guard's rule (module docstring); ``enabled`` False plays the plan every round."""

    enabled: bool = True
    shorter_chains: bool = True  # a losing lookup chain is first shortened, where that is estimated to pay
    # rounds that drafted nothing count towards the ``probe_rounds`` a judgement waits for (never in the cost)
    count_empty_rounds: bool = True
    probe_rounds: int = PROBE_ROUNDS
    window_rounds: int = WINDOW_ROUNDS
    first_backoff: int = FIRST_BACKOFF
    last_backoff: int = LAST_BACKOFF


class FallbackGuard:
    """Chooses, before each round, whether the plan (``"plan"``) or plain decoding (``"plain"``) plays it.

    ``plain_ms`` is a prior for one plain token; measured plain rounds join it (without one, the
    plan's first ``probe_rounds`` rounds are followed by ``PLAIN_PROBE`` plain rounds, after which
    the guard compares: a plan that wins keeps its first rounds, when a prediction or a copy may
    commit the most; with ``verify_ms``, the profile's T(n), none while the plan wins by far). Everything
    restarts with each request (:meth:`start`), the plain cost too: a plain token's cost grows with the context (attention reads
    every cached row; on SmolLM2 on a 2-core Xeon 15 ms after a short prompt, 31 ms after a
    2,000-token one), so a cost carried over from another request would compare the plan against
    the wrong floor. ``cost`` replaces a round's measured seconds, all of them verify seconds:
    ``cost(played, seconds, tokens)`` (tests decide by a deterministic cost).

    >>> guard = FallbackGuard(plain_ms=10.0)
    >>> guard.start()
    >>> for _ in range(4):
    ...     guard.record(guard.choose(), seconds=0.025, tokens=1)  # 25 ms a token: worse than plain
    >>> guard.choose(), guard.plain_tokens_left
    ('plain', 16)
    """

    def __init__(self, settings: GuardSettings = GuardSettings(), plain_ms: float | None = None,
                 cost: Callable[[str, float, int], float] | None = None,
                 verify_ms: Callable[[int], float] | None = None):
        self.settings = settings
        self.cost = cost
        self.verify_ms = verify_ms  # the profile's T(n): what a round of n verified tokens costs in plain tokens
        self.prior_seconds = plain_ms / 1000.0 if plain_ms is not None and plain_ms > 0 else None
        self.start()

    def start(self, chain: int | None = None) -> None:
        """A new request: the plan plays first, with a fresh window, the first back-off and no plain cost
        measured yet (only the prior, if one was given). ``chain``: the plan's lookup chain, which the guard
        may shorten (``cap``) before falling back to plain decoding; None: the engine plays no such chain."""
        shortens = chain is not None and chain > 1 and self.verify_ms is not None and self.settings.shorter_chains
        self.cap = chain if shortens else None  # the longest chain the engine may draft after a rejection
        self.shortenings = 0
        self.plain_seconds: deque[float] = deque(maxlen=self.settings.window_rounds)  # per plain token, recent rounds
        if self.prior_seconds is not None:
            self.plain_seconds.append(self.prior_seconds)
        # the plan's recent rounds: (seconds, tokens committed, tokens drafted, verify seconds)
        self.window: deque[tuple[float, int, int, float]] = deque(maxlen=self.settings.window_rounds)
        self.empty_rounds = 0  # plan rounds that drafted nothing since the window last restarted
        self.estimates: deque[float] = deque(maxlen=self.settings.window_rounds)  # plain s/token, from plan verifies
        self.backoff = self.settings.first_backoff
        self.plain_tokens_left = 0
        self.switches = 0
        self.plain_rounds = 0

    @property
    def plain_ms(self) -> float | None:
        """ms per plain token: the median of the recent plain rounds (or the prior)."""
        if not self.plain_seconds:
            return None
        ordered = sorted(self.plain_seconds)
        return 1000.0 * ordered[len(ordered) // 2]

    @property
    def plan_ms(self) -> float | None:
        """ms per token of the plan's recent rounds, once ``probe_rounds`` of them were played (with
        ``count_empty_rounds``, rounds that drafted nothing count towards them, and one drafting round
        suffices)."""
        played = len(self.window) + (self.empty_rounds if self.settings.count_empty_rounds else 0)
        if not self.window or played < self.settings.probe_rounds:
            return None
        return 1000.0 * sum(row[0] for row in self.window) / max(1, sum(row[1] for row in self.window))

    def choose(self) -> str:
        if not self.settings.enabled:
            return "plan"
        return "plain" if self.plain_tokens_left > 0 else "plan"

    def record(self, played: str, seconds: float, tokens: int, verified: int = 0, verify_seconds: float = 0.0) -> None:
        """What the round ``played`` cost (draft and verify seconds) and committed (bonus included);
        ``verified`` tokens (root included) took ``verify_seconds`` of it (0: not known). A plan round that
        verified its root alone (a lookup with no match) was a plain round: it joins the plain cost, not
        the plan's window, so a stretch without matches neither counts against the plan nor needs a probe."""
        if self.cost is not None:
            seconds = self.cost(played, seconds, tokens)
            verify_seconds = seconds if verified > 0 else 0.0  # a given cost is all verify
        if played == "plan" and verified == 1:  # the drafter had nothing: a plain round in all but name
            self.plain_seconds.append(seconds)  # measures plain decoding, and is no evidence against the plan
            self.empty_rounds += 1
            return
        if played == "plain":
            self.plain_rounds += 1
            self.plain_seconds.append(seconds / max(1, tokens))
            self.plain_tokens_left = max(0, self.plain_tokens_left - tokens)
            if self.plain_tokens_left == 0:
                self._judge()  # after the plain probe the plan's window waits for it (a back-off cleared it)
            return
        self.window.append((seconds, tokens, max(0, verified - 1), verify_seconds))
        if self.verify_ms is not None and verified > 0 and verify_seconds > 0:
            self.estimates.append(verify_seconds * self.verify_ms(1) / self.verify_ms(verified))
        self._judge()

    def sure_win(self) -> bool:
        """The plan's window costs at most ``SURE_WIN`` of plain decoding as its own verifies estimate it."""
        if not self.estimates or self.plan_ms is None:
            return False
        return self.plan_ms <= SURE_WIN * 1000.0 * sum(self.estimates) / len(self.estimates)

    def _judge(self) -> None:
        """Back off to plain decoding if the plan's window costs more per token than plain decoding;
        measure plain decoding first (``PLAIN_PROBE`` rounds) if this request has not yet."""
        if not self.settings.enabled or self.plan_ms is None:
            return
        if self.plain_ms is None:
            if not self.sure_win():  # else plain decoding is measured only once the plan stops winning by far
                self.plain_tokens_left = PLAIN_PROBE
        elif self.plan_ms >= self.plain_ms:
            shorter = self.shorter_chain()
            if shorter is not None:  # a shorter chain beats plain decoding on the window's own rounds
                self.cap = shorter
                self.shortenings += 1
                self._restart_window()  # probed afresh at the new length
                return
            self.plain_tokens_left = self.backoff
            self.backoff = min(2 * self.backoff, self.settings.last_backoff)
            self._restart_window()  # the plan is probed afresh after the back-off
            self.switches += 1
        elif len(self.window) == self.settings.window_rounds:
            self.backoff = self.settings.first_backoff  # a whole window paid: the next loss backs off briefly

    def _restart_window(self) -> None:
        self.window.clear()
        self.empty_rounds = 0

    def chain_ms(self, chain: int) -> float:
        """ms per committed token the window's rounds would have cost with drafts cut at ``chain`` tokens
        (docs/planner-math.md section 12.5; a round's cost as in Leviathan et al., arXiv 2211.17192, its draft
        length chosen at run time as in DISCO, arXiv 2405.04304): a round that drafted ``d`` tokens and accepted ``a`` drafts
        ``m = min(d, chain)``, its verify scaled by T(m + 1) / T(d + 1) (the profile's curve, whose ratios
        travel between CPUs better than its milliseconds); a round that accepted ``a >= chain`` commits its
        ``a + 1`` tokens over ``ceil((a + 1) / (chain + 1))`` such rounds (a copy cut into chains; the
        doubling after a whole chain is left out, so a short chain is never flattered)."""
        seconds = tokens = 0.0
        for round_seconds, committed, drafted, verify_seconds in self.window:
            cut = min(drafted, chain)
            scale = self.verify_ms(cut + 1) / self.verify_ms(drafted + 1) if drafted > cut else 1.0
            rounds = -(-committed // (chain + 1)) if committed - 1 >= chain else 1
            seconds += rounds * (round_seconds - verify_seconds + verify_seconds * scale)
            tokens += committed
        return 1000.0 * seconds / max(1.0, tokens)

    def shorter_chain(self) -> int | None:
        """The chain below ``cap`` (halvings of it) whose re-costed window (:meth:`chain_ms`) is the cheapest,
        if that beats plain decoding; None: no shorter chain does (or the engine plays none)."""
        if self.cap is None or self.plain_ms is None or len(self.window) < self.settings.probe_rounds:
            return None
        chains, chain = [], self.cap // 2
        while chain >= 1:
            chains.append(chain)
            chain //= 2
        costs = {chain: self.chain_ms(chain) for chain in chains}
        best = min(costs, key=costs.get, default=None)
        return best if best is not None and costs[best] < self.plain_ms else None


def first_chain(gamma: int, verify_ms: Callable[[int], float], knee: float = FIRST_CHAIN_KNEE) -> int:
    """The first chain of a fresh match (docs/planner-math.md section 12.5): of the chains up to ``gamma`` whose
    verify costs at most ``FIRST_CHAIN_PLAIN_TOKENS`` plain tokens, T(c + 1) <= 6 T(1), the shortest that
    verifies a token at most ``knee`` times as dearly as the cheapest, T(c + 1) / (c + 1) (1.0: the cheapest). A chain
    whose verify costs what the next longer one's does (T read as steps between profiled widths) is never it.
    A coincidental match then costs at most T(c + 1) - T(1); a real copy pays one such chain before the plan's
    gamma.

    >>> epyc = lambda n: {1: 26.6, 12: 150.5, 16: 147.8, 24: 210.8, 64: 333.5}.get(n, 26.6 + 12.0 * (n - 1))
    >>> first_chain(63, epyc), first_chain(7, epyc)  # 16 tokens: none within 10% of its per-token cost; 8: 5
    (15, 4)
    >>> smollm2 = {1: 6.5, 2: 11.9, 4: 17.9, 6: 25.7, 8: 27.8, 10: 35.5, 12: 38.5, 16: 48.3, 64: 159.2}
    >>> first_chain(63, lambda n: smollm2[min(w for w in smollm2 if w >= n)])  # T(8) / 8 within 8% of T(12) / 12
    7
    >>> first_chain(63, lambda n: 10.0 * n)  # every chain verifies a token alike: the shortest risks least
    1
    """
    budget = FIRST_CHAIN_PLAIN_TOKENS * verify_ms(1)
    chains = [chain for chain in range(1, gamma + 1) if verify_ms(chain + 1) <= budget
              and (chain == gamma or verify_ms(chain + 2) > verify_ms(chain + 1))] or [1]
    cheapest = min(verify_ms(chain + 1) / (chain + 1) for chain in chains)
    return min(chain for chain in chains if verify_ms(chain + 1) / (chain + 1) <= knee * cheapest)


class ChainGrowth:
    """A lookup's chain grows after a round that accepted its whole draft, its verify width doubling
    (core/limits.py ``grown_chain``: c -> 2c + 1) up to ``LONGEST_LOOKUP_CHAIN``, and returns to a fresh match's first chain after a round that rejected a token
    (docs/planner-math.md section 12.5; a dynamic draft length as in DISCO, arXiv 2405.04304, and
    transformers' "heuristic" schedule, here doubling because a copy, once it holds, tends to hold for
    a whole span). A round that drafted nothing (no match) changes nothing. Only for drafters that
    run no model (a lookup drafts a longer chain at no extra cost); the guard still watches the cost.

    >>> growth = ChainGrowth(5)
    >>> growth.record(drafted=5, committed=6); growth.gamma
    11
    >>> growth.record(drafted=11, committed=12); growth.record(drafted=23, committed=24); growth.gamma
    47
    >>> growth.record(drafted=47, committed=7); growth.gamma
    5

    With the target's verify cost ``verify_ms(n)`` (the profile's T(n)) chains grow only where the
    two longest chains growth reaches verify a token at most ``GROWTH_GAIN`` of what the plan's chain
    does: T(c + 1) / (c + 1) <= 0.6 T(g + 1) / (g + 1) for both (c = 47 and 63 from g = 5). Where
    T(n) / n is already flat (a small model past a few tokens) a longer chain buys little per accepted
    token and costs a wider verify per rejected one.

    >>> flat = ChainGrowth(7, verify_ms=lambda n: 5.0 + 4.0 * n)  # T(n) / n barely falls past n = 8
    >>> flat.record(drafted=7, committed=8); flat.gamma
    7
    >>> dip = lambda n: 0.4 * n if n == 64 else 1.0 * n  # flat, but for one fast width at the longest chain
    >>> ChainGrowth(2, verify_ms=dip).can_grow, ChainGrowth(2, verify_ms=lambda n: 20.0 + n).can_grow
    (False, True)

    With ``verify_ms`` a fresh match (the request's first, or the first after a rejection) drafts
    :func:`first_chain` tokens, and a first chain accepted whole goes straight to the plan's gamma: a
    lookup's copies are long where copying pays (46 tokens a match on HumanEval) and a few tokens on chat
    (3.6 on Spec-Bench, where a 63-token chain costs 12 plain tokens' verify to commit 4.6).

    >>> copy = ChainGrowth(63, verify_ms=lambda n: 20.0 + 2.0 * n)  # T(34) / 34 within 10% of T(56) / 56
    >>> copy.gamma
    33
    >>> copy.record(drafted=33, committed=34); copy.gamma
    63
    >>> copy.record(drafted=63, committed=9); copy.gamma
    33
    """

    def __init__(self, gamma: int, longest: int = LONGEST_LOOKUP_CHAIN,
                 verify_ms: Callable[[int], float] | None = None, first: int | None = None):
        self.base = gamma
        self.longest = max(gamma, longest)
        if first is None:  # a fresh match's chain: first_chain from the profile's T(n), else the plan's gamma
            first = first_chain(gamma, verify_ms) if verify_ms is not None else gamma
        self.first = min(gamma, first)
        self.gamma = self.first
        self.floor = gamma  # the chain after a rejection: the plan's gamma, or the guard's shorter one
        self.grows = verify_ms is None or self._long_chains_pay(verify_ms)

    def _long_chains_pay(self, verify_ms: Callable[[int], float]) -> bool:
        """The two longest chains growth reaches (doubling from gamma) verify a token at most ``GROWTH_GAIN``
        of the plan's chain: two, so that one width where the CPU's kernels happen to be fast (SmolLM2's
        T(64) below its T(48) on the Xeon of docs/results.md) does not make a flat curve look steep."""
        per_token = lambda n: verify_ms(n + 1) / (n + 1)  # a chain of n drafted tokens verifies n + 1
        reached, chain = [], self.base
        while chain < self.longest:
            chain = grown_chain(chain, self.longest)
            reached.append(chain)
        return all(per_token(chain) <= GROWTH_GAIN * per_token(self.base) for chain in reached[-2:])

    @property
    def reach(self) -> int:
        """The longest chain growth drafts: ``longest`` where chains grow, else the plan's gamma."""
        return self.longest if self.grows else self.base

    @property
    def can_grow(self) -> bool:
        """False where no round can draft past the plan's gamma (T(n) / n too flat, or gamma already the longest)."""
        return self.grows and self.longest > self.base

    def start(self) -> None:
        self.floor = self.base
        self.gamma = self.first

    def shorten(self, chain: int) -> None:
        """Rejections return to ``chain`` (the guard's shorter chain, FallbackGuard.shorter_chain) instead of
        the plan's gamma; a chain accepted whole still doubles, back up to the plan's gamma at least."""
        self.floor = min(chain, self.base)
        self.gamma = min(self.gamma, self.floor)

    def record(self, drafted: int, committed: int) -> None:
        if drafted <= 0:
            return
        if committed != drafted + 1:
            self.gamma = min(self.first, self.floor)  # the next match is a fresh one
        elif self.gamma < self.base and self.floor == self.base:
            self.gamma = self.base  # a fresh match's first chain held: a copy, drafted at the plan's gamma
        else:
            self.gamma = grown_chain(self.gamma, self.longest if self.grows else self.base)

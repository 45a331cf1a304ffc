"""Predict a published setting: the roofline's T(n) on its GPU, an acceptance model from what it
reports, the speedup of the shape it measured and the shape the planner would choose
(docs/planner-math.md, section 13).

The acceptance model. A setting gives either chain ``position_rates`` (P(position i accepted |
all before accepted)) or ``tau``, the tokens per target forward at the measured shape. A tree
needs more: the chance that the k-th ranked sibling is accepted (Sequoia, arXiv 2402.12374).
We assume *memoryless ranks*: each sibling catches the same fraction ``a`` of the probability
the siblings before it missed, ``rank_accept[k] = a (1 - a)^k``, and every depth has the same
``a`` (Leviathan et al.'s constant rate, arXiv 2211.17192, extended to siblings). One number
then fixes everything:

* from ``position_rates``: ``a`` is the constant rate whose chain accepts as many tokens as the
  given rates over their length; chains use the rates themselves (the last one repeated beyond);
* from ``tau``: ``a`` is the rate at which the best tree (or chain) of the measured shape
  accepts ``tau`` tokens per forward, solved by bisection (F rises with ``a``).

The cost side is the roofline (:mod:`.roofline`) of target and drafter on the SKU at the
setting's batch, over ``CONTEXT`` cached tokens per sequence; an n-gram lookup costs
``NGRAM_CALL_MS`` per sequence per call. The measured shape is priced as the planner prices a
stage (``depth * t_draft(width) + T(budget)`` for a tree, ``gamma * t_draft(1) + T(gamma + 1)``
for a chain); the chosen shape is :func:`~specplan.planner.solve.solve_plan`'s, one stage.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from specplan.core.plan import StageShape
from specplan.core.profile import AcceptanceEntry, DeviceInfo, LatencyCurve, ModelEntry, ModelShape, Profile, RetrievalEntry
from specplan.core.published import MeasuredShape, PublishedSetting

from .batch import batch_view
from .options import PlanOptions
from .hardware.roofline import Calibration, DeviceRoof, Precision, roofline_ms
from .sequence import expected_accepted_length
from .solve import solve_plan
from .tree_dp import best_tree

CONTEXT = 512  # cached tokens per sequence: a chat prompt and part of its answer (assumption)
RANK_WIDTH = 8  # siblings per node the tree search may use
NGRAM_CALL_MS = 0.02  # one host-side n-gram lookup (profiles/cpu-*: 0.01-0.04 ms per call)
HISTOGRAM_SAMPLES = 1_000_000  # chains the synthetic profile's accepted_hist stands for
WIDTHS = tuple(range(1, 257))
PRECISION_KEYS = {"fp16": "float16", "bf16": "bfloat16", "w8a8": "w8a8", "w4a16": "w4a16", "w4a8": "w4a8"}


@dataclass(frozen=True)
class RoleModel:
    """A model of the setting as the roofline sees it; ``shape`` None: an n-gram lookup."""

    shape: ModelShape | None
    precision: Precision | None
    head: bool = False


@dataclass(frozen=True)
class Prediction:
    """The roofline's and planner's answer for one setting, beside what the source measured."""

    name: str
    sku: str
    batch: int
    measured: MeasuredShape
    measured_speedup: float
    predicted_speedup: float  # of the measured shape
    accepted_length: float  # the acceptance model's tokens per target forward at the measured shape
    top_rate: float  # a of the memoryless-rank model
    plain_ms: float  # modelled T(1) of the target at the batch
    baseline_ms: float  # the source's, 0 when not given
    chosen: dict  # {kind: plain} | {kind: sequence, gamma} | {kind: tree, budget, depth}
    chosen_predicted_speedup: float

    @property
    def ratio(self) -> float:
        return self.predicted_speedup / self.measured_speedup


def memoryless_ranks(rate: float, width: int = RANK_WIDTH) -> tuple[float, ...]:
    """``rank_accept[k] = a (1 - a)^k``: each sibling catches ``a`` of what the earlier ones missed.

    >>> memoryless_ranks(0.5, 3)
    (0.5, 0.25, 0.125)
    """
    return tuple(rate * (1.0 - rate) ** k for k in range(width))


def chain_accepted(rates: tuple[float, ...], gamma: int) -> float:
    """Tokens per forward of a chain of ``gamma``, bonus included: 1 + sum_i prod_{j<=i} rate_j,
    the last rate repeated beyond the given ones.

    >>> chain_accepted((0.5, 0.5), 3)
    1.875
    """
    total, reach = 1.0, 1.0
    for position in range(gamma):
        reach *= rates[min(position, len(rates) - 1)]
        total += reach
    return total


def _bisect(value: Callable[[float], float], goal: float, what: str) -> float:
    low, high = 1e-6, 1.0 - 1e-9
    if value(high) < goal - 1e-9:
        raise ValueError(f"{what}: tau {goal} is more than the shape can accept ({value(high):.3f} at rate 1)")
    for _ in range(40):
        middle = (low + high) / 2
        low, high = (middle, high) if value(middle) < goal else (low, middle)
    return (low + high) / 2


def shape_accepted(shape: MeasuredShape, rate: float) -> float:
    """Tokens per forward of ``shape`` at the constant rate ``rate`` (the best tree of its caps)."""
    if shape.kind == "sequence":
        return expected_accepted_length(shape.gamma, rate)
    return best_tree(memoryless_ranks(rate), shape.budget, shape.depth).value


def acceptance_rate(setting: PublishedSetting) -> float:
    """``a`` of the memoryless-rank model for a setting (module docstring)."""
    if setting.position_rates:
        rates = setting.position_rates
        goal = chain_accepted(rates, len(rates))
        return _bisect(lambda rate: expected_accepted_length(len(rates), rate), goal, setting.name)
    return _bisect(lambda rate: shape_accepted(setting.shape, rate), setting.tau, setting.name)


def _curve(role: RoleModel, device: DeviceRoof, batch: int, calibration: Calibration | None) -> LatencyCurve:
    ms = tuple(roofline_ms(role.shape, role.precision, n, CONTEXT, device, calibration, batch) for n in WIDTHS)
    return LatencyCurve(CONTEXT, WIDTHS, ms, "roofline", batch)


def synthetic_profile(setting: PublishedSetting, target: RoleModel, drafter: RoleModel, device: DeviceRoof,
                      rate: float, calibration: Calibration | None = None) -> Profile:
    """A profile of the setting: roofline curves at batch 1 and the setting's batch, one acceptance entry."""
    batches = sorted({1, setting.batch})
    models = [ModelEntry("target", setting.target.arch, "published", role="target", dtype="float16",
                         latency=tuple(_curve(target, device, b, calibration) for b in batches), shape=target.shape)]
    retrieval = ()
    if drafter.shape is None:
        retrieval = (RetrievalEntry("drafter", "ngram:3", NGRAM_CALL_MS),)
    else:
        source = f"head:{setting.drafter.arch}" if drafter.head else setting.drafter.arch
        models.insert(0, ModelEntry("drafter", source, "published", dtype="float16",
                                    latency=tuple(_curve(drafter, device, b, calibration) for b in batches),
                                    shape=drafter.shape))
    rates = setting.position_rates or (rate,)
    gamma, reach = 32, [1.0]  # reach[k]: P(the first k draft tokens are accepted)
    for position in range(gamma):
        reach.append(reach[-1] * rates[min(position, len(rates) - 1)])
    hist = [round(HISTOGRAM_SAMPLES * (reach[k] - (reach[k + 1] if k < gamma else 0.0))) for k in range(gamma + 1)]
    entry = AcceptanceEntry("drafter", "target", 0.0, rate, gamma, tuple(hist), memoryless_ranks(rate),
                            samples=HISTOGRAM_SAMPLES)
    device_info = DeviceInfo(device.kind, device.name, device.sku, "roofline")
    return batch_view(Profile(device_info, tuple(models), (entry,), retrieval), setting.batch)


def _shape_ms(profile: Profile, setting: PublishedSetting, rate: float) -> tuple[float, float]:
    """(ms per round, tokens per round) of the measured shape on the profile's curves."""
    shape = setting.shape
    curves = {model.id: model.latency[0] for model in profile.models}
    verify = lambda n: _at(curves["target"], n)  # noqa: E731
    if "drafter" in curves:
        draft = lambda width: _at(curves["drafter"], width)  # noqa: E731
    else:
        draft = lambda width: profile.retrieval[0].ms_per_call  # noqa: E731
    if shape.kind == "sequence":
        accepted = chain_accepted(setting.position_rates or (rate,), shape.gamma)
        return shape.gamma * draft(1) + verify(shape.gamma + 1), accepted
    tree = best_tree(memoryless_ranks(rate), shape.budget, shape.depth)
    return tree.depth * draft(max(tree.width, 1)) + verify(shape.budget), tree.value


def _at(curve: LatencyCurve, n: int) -> float:
    """T(n) of a roofline curve, which holds every width 1..256."""
    return curve.ms[curve.n.index(n)]


def chosen_shape(stage_shape: StageShape | None) -> dict:
    """The ``chosen_shape`` record of a plan's top stage (None: plain decoding), in the form of
    :attr:`MeasuredShape.record`."""
    if stage_shape is None:
        return {"kind": "plain"}
    if stage_shape.kind == "sequence":
        return MeasuredShape("sequence", gamma=stage_shape.gamma).record
    return MeasuredShape("tree", budget=stage_shape.size, depth=stage_shape.depth or stage_shape.max_depth).record


def predict_setting(setting: PublishedSetting, target: RoleModel, drafter: RoleModel, device: DeviceRoof,
                    calibration: Calibration | None = None) -> Prediction:
    """The :class:`Prediction` of one setting (module docstring)."""
    rate = acceptance_rate(setting)
    profile = synthetic_profile(setting, target, drafter, device, rate, calibration)
    plain = _at(profile.target.latency[0], 1)
    round_ms, accepted = _shape_ms(profile, setting, rate)
    options = PlanOptions(max_budget=256, max_depth=16, gammas=tuple(range(1, 17)), max_stages=1)
    best = solve_plan(profile, options).candidates[0]
    top = best.stages[-1].shape if best.stages else None
    return Prediction(setting.name, setting.sku, setting.batch, setting.shape, setting.speedup,
                      plain * accepted / round_ms, accepted, rate, plain, setting.baseline_ms_per_token,
                      chosen_shape(top), plain / best.ms_per_token)

"""profile.yaml: what was measured on a device (docs/formats.md).

Latency curves T_m(n) per model and precision, retrieval drafter costs, and acceptance
statistics per (drafter, verifier, temperature). Plain frozen dataclasses; YAML only
serialises them. No torch here: the planner reads these types.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from specplan.core.backends import BackendTraits, traits_of_source
from specplan.core.drafter_spec import parse_drafter_spec
from specplan.core.errors import DrafterSpecError, ProfileError
from specplan.core.limits import check_count
from specplan.core.prediction import PredictionCalibration, calibration_from_dict, calibration_to_dict
from specplan.core.prompt_counts import PromptCounts
from specplan.core.yamlio import SCHEMA_VERSION, read_document, write_document

# profile.yaml versions: 1 (T(n) at batch 1) and 2 (latency curves may carry `batch`, T(n, b)).
# A profile is written with the lowest version that holds it, so a batch-1 profile stays version 1.
PROFILE_VERSIONS = (1, 2)
BATCHED_VERSION = 2
NUMERICS = ("", "exact", "fast")  # DeviceInfo.numerics


@dataclass(frozen=True)
class DeviceInfo:
    kind: str  # cpu | cuda
    name: str  # human readable, e.g. "AMD EPYC (2 threads)"
    sku: str  # cpu | h100-sxm | ...
    # measured | roofline | llama.cpp (the llama.cpp backend measured the curves: plans run on it) |
    # engine:llama.cpp (`profile --engine`: llama-server's costs, for `export` and `bench --engine` only)
    source: str = "measured"
    # llama.cpp only (docs/backends.md, "What lossless means here"): ``exact``, verify logits
    # bit-identical to one-token decodes, or ``fast``, llama.cpp's own kernels; empty elsewhere
    numerics: str = ""


@dataclass(frozen=True)
class LatencyCurve:
    """ms for one forward of ``batch`` sequences x n new tokens each, over ``context`` cached
    tokens per sequence (T(n, b), docs/planner-math.md section 11; batch 1 = T(n))."""

    context: int
    n: tuple[int, ...]
    ms: tuple[float, ...]
    source: str = "measured"
    batch: int = 1


@dataclass(frozen=True)
class ModelShape:
    """The architecture numbers the roofline latency model reads (``planner/hardware/roofline.py``).

    Recorded by the profiler from ``model.config`` (``source: config``); a layer-skip view
    records the layers it keeps. ``parameters``: all weights, embeddings included (0 when
    not recorded; the roofline then counts them from the other fields). ``extra_weights``:
    matmul weights outside the decoder layers and the LM head, read by every forward (an
    EAGLE-style head's feature projection; 0 for a plain decoder).
    """

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    intermediate: int
    tied_embeddings: bool = True
    parameters: int = 0
    source: str = "config"  # config | builtin (a known model's published config)
    extra_weights: int = 0


@dataclass(frozen=True)
class ModelEntry:
    id: str  # the name plans use
    source: str  # what --target / model: / layerskip: said
    fingerprint: str
    quant: str = "none"  # none | nf4 | gptq-w4g128
    dtype: str = "float32"
    role: str = "drafter"  # target | drafter | variant (another precision of the target, latency only)
    latency: tuple[LatencyCurve, ...] = ()
    base: str | None = None  # id of the model whose weights this one shares
    mode: str = "eager"  # eager | compiled: what the runtime measured
    shape: ModelShape | None = None  # architecture, for roofline latency on other devices
    # ms the batched runtime adds to each forward of b sequences x n tokens beyond T(n, b): padding
    # masks, holes, rollback and per-sequence verification, measured per batch (planner-math.md 11.4)
    batch_overhead: tuple[LatencyCurve, ...] = ()
    # llama.cpp fast numerics: chain extends of this many tokens or more run on a second copy of the
    # weights that llama.cpp does not repack, faster there (docs/backends.md, "Wide verifies on
    # unrepacked weights"); ``latency`` is then timed that way from this width on. 0: never
    wide_from: int = 0
    # llama.cpp targets: ms of one plain token as llama.cpp itself decodes it on this machine (its own
    # settings: every thread, weights repacked, flash attention as it chooses), at the first curve's
    # context: the floor every plan is held against (docs/planner-math.md section 9.1). 0: not measured
    engine_plain_ms: float = 0.0
    # llama.cpp fast numerics: "off" where the profile measured the target's one-token decodes at most
    # FLASH_OFF_GAIN of their time without flash attention (profiler/engine_floor.py); "": llama.cpp's choice
    flash_attention: str = ""


@dataclass(frozen=True)
class RetrievalEntry:
    id: str  # e.g. ngram-3
    source: str  # e.g. ngram:3
    ms_per_call: float


@dataclass(frozen=True)
class AcceptanceEntry:
    """Acceptance of ``drafter``'s tokens by ``verifier`` at ``temperature``.

    ``alpha``: per-token acceptance in chain drafting; ``accepted_hist[a]``: how many
    gamma-chains had exactly ``a`` draft tokens accepted (bonus not counted), a = 0..gamma;
    ``rank_accept[k]``: probability that the (k+1)-th ranked child is the accepted one
    (Sequoia arXiv 2402.12374); ``retrieval_rank_accept``: the same for retrieved extra
    siblings with the model's siblings present (Graft arXiv 2605.20104); ``drafted_hist[d]``
    (retrieval drafters): how many of those rounds had exactly ``d`` draft tokens to propose,
    d = 0..gamma (a lookup that finds no match drafts none, and its round verifies the root
    alone); empty: every round drafted ``gamma`` (docs/planner-math.md section 1).
    ``per_prompt``: the same rounds counted per calibration prompt, in prompt order (core/prompt_counts.py;
    the planner's spread over prompts, section 9.2); empty in profiles from before they were kept.
    """

    drafter: str
    verifier: str
    temperature: float
    alpha: float
    gamma: int
    accepted_hist: tuple[int, ...] = ()
    rank_accept: tuple[float, ...] = ()
    retrieval_rank_accept: tuple[float, ...] = ()
    samples: int = 0
    drafted_hist: tuple[int, ...] = ()
    per_prompt: tuple[PromptCounts, ...] = ()


@dataclass(frozen=True)
class Profile:
    device: DeviceInfo
    models: tuple[ModelEntry, ...]
    acceptance: tuple[AcceptanceEntry, ...]
    retrieval: tuple[RetrievalEntry, ...] = ()
    created: str = ""
    software: dict[str, str] = field(default_factory=dict)
    calibration: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION
    # a client's prediction replayed as a drafter over the calibration outputs, where the prompts carried
    # one (core/prediction.py; docs/planner-math.md section 12.6); None: none did, or an older profile
    prediction: PredictionCalibration | None = None

    @property
    def backend_traits(self) -> BackendTraits:
        """The runtime backend whose costs the profile measured, which its plans run on: ``llama.cpp``
        when llama.cpp measured the latency curves (``device.source``), else ``torch`` (core/backends.py)."""
        return traits_of_source(self.device.source)

    @property
    def backend(self) -> str:
        """The name of :attr:`backend_traits`."""
        return self.backend_traits.name

    @property
    def engine(self) -> str:
        """The serving engine whose costs the profile holds (``profile --engine``), else ""; its plans
        are exported to that engine, not run by specplan."""
        return self.device.source.partition("engine:")[2]

    @property
    def exact(self) -> bool:
        """Whether its llama.cpp sessions run with exact numerics (a profile from before the
        choice existed was measured exact); always True on torch."""
        return self.device.numerics != "fast"

    @property
    def target(self) -> ModelEntry:
        for model in self.models:
            if model.role == "target":
                return model
        raise ProfileError("profile has no model with role: target; re-run `specplan profile`")

    def model(self, model_id: str) -> ModelEntry | None:
        return next((m for m in self.models if m.id == model_id), None)

    def retrieval_entry(self, drafter_id: str) -> RetrievalEntry | None:
        return next((r for r in self.retrieval if r.id == drafter_id), None)

    def acceptance_for(self, drafter: str, verifier: str, temperature: float) -> AcceptanceEntry | None:
        """The entry for the pair at this temperature, or at the nearest measured one."""
        entries = [a for a in self.acceptance if a.drafter == drafter and a.verifier == verifier]
        if not entries:
            return None
        return min(entries, key=lambda a: abs(a.temperature - temperature))

    def drafter_ids(self) -> list[str]:
        return [m.id for m in self.models if m.role == "drafter"] + [r.id for r in self.retrieval]

    def drafter_kind(self, drafter_id: str) -> str:
        """The kind of ``drafter_id``'s SPEC as this profile recorded it (``ngram``, ``recycle``, ``model``, ...);
        ``model`` for a model named by path or an id the profile lacks."""
        entry = self.model(drafter_id) or self.retrieval_entry(drafter_id)
        try:
            return parse_drafter_spec(entry.source).kind if entry is not None else "model"
        except DrafterSpecError:  # a target or middle model named by path: a model
            return "model"

    def grows_trees(self, drafter_id: str) -> bool:
        """Whether this profile's backend grows tree stages from ``drafter_id`` (core/backends.py,
        ``tree_kinds``), so that the planner never emits a shape the runtime refuses."""
        return self.backend_traits.grows_trees(self.drafter_kind(drafter_id))


LARGEST_COUNT = 10**9  # widths, contexts, layer counts, sample counts: anything above is not a measurement


def _flash_attention(value, where: str) -> str:
    """A model's flash attention setting: "" (llama.cpp's choice) or "off"; ProfileError otherwise."""
    if value not in ("", "off"):
        raise ProfileError(f"{where} is {value!r}; it must be \"off\" or absent (llama.cpp's choice)")
    return str(value)


def _count(value: Any, where: str, low: int = 0) -> int:
    try:
        return check_count(value, where, low, LARGEST_COUNT)
    except ValueError as error:
        raise ProfileError(f"{error}; fix the profile or re-profile") from None


def _finite(value: Any, where: str, low: float = 0.0) -> float:
    """A finite number >= ``low`` (latencies, temperatures, costs)."""
    if isinstance(value, bool):
        raise ProfileError(f"{where} = {value!r} is not a number; fix the profile or re-profile")
    number = float(value)
    if not math.isfinite(number) or number < low:
        raise ProfileError(f"{where} = {value!r} must be a finite number >= {low:g}; fix the profile or re-profile")
    return number


def _probability(value: Any, where: str) -> float:
    number = float(value)
    if isinstance(value, bool) or not 0.0 <= number <= 1.0:  # also NaN
        raise ProfileError(f"{where} = {value!r} is not a probability in [0, 1]; re-profile")
    return number


def _curve(raw: dict[str, Any], where: str) -> LatencyCurve:
    n = tuple(_count(v, f"{where}.n", 1) for v in raw["n"])
    ms = tuple(_finite(v, f"{where}.ms") for v in raw["ms"])
    if len(n) != len(ms) or not n:
        raise ProfileError(f"{where}: n and ms must be non-empty lists of equal length")
    if any(v <= 0 for v in ms) or list(n) != sorted(set(n)):
        raise ProfileError(f"{where}: ms must be positive and n strictly increasing")
    return LatencyCurve(_count(raw.get("context", 0), f"{where}.context"), n, ms, str(raw.get("source", "measured")),
                        _count(raw.get("batch", 1), f"{where}.batch", 1))


def curve_from_dict(raw: Any, where: str) -> LatencyCurve:
    """A checked :class:`LatencyCurve` from its YAML mapping (``ProfileError`` naming ``where``)."""
    if not isinstance(raw, dict):
        raise ProfileError(f"{where} must be a mapping with n and ms; re-profile")
    try:
        return _curve(raw, where)
    except (KeyError, TypeError, ValueError) as exc:
        raise ProfileError(f"{where} is malformed ({exc}); re-profile") from None


def _curves(raw: Any, where: str, version: int) -> tuple[LatencyCurve, ...]:
    """A model's curves, batch 1 first (readers that take ``latency[0]`` get a batch-1 curve)."""
    curves = tuple(_curve(c, where) for c in raw or ())
    if version != BATCHED_VERSION and any(curve.batch != 1 for curve in curves):
        raise ProfileError(f"{where}: a curve with `batch` needs schema_version {BATCHED_VERSION}; "
                           "regenerate it with `specplan profile`")
    return tuple(sorted(curves, key=lambda curve: curve.batch))


def _overheads(raw: Any, where: str, version: int) -> tuple[LatencyCurve, ...]:
    """Batched-runtime overhead curves: ms >= 0 at increasing widths, one per batch > 1."""
    curves = []
    for item in raw or ():
        n = tuple(_count(v, f"{where}.n", 1) for v in item["n"])
        ms = tuple(_finite(v, f"{where}.ms") for v in item["ms"])
        batch = _count(item.get("batch", 0), f"{where}.batch", 2)
        if len(n) != len(ms) or not n or list(n) != sorted(set(n)):
            raise ProfileError(f"{where}: n and ms must be non-empty lists of equal length, n strictly increasing")
        curves.append(LatencyCurve(_count(item.get("context", 0), f"{where}.context"), n, ms,
                                   str(item.get("source", "measured")), batch))
    if curves and version != BATCHED_VERSION:
        raise ProfileError(f"{where} needs schema_version {BATCHED_VERSION}; regenerate it with `specplan profile`")
    return tuple(sorted(curves, key=lambda curve: curve.batch))


def keep_drafters(profile: "Profile", kept: set[str]) -> "Profile":
    """``profile`` with only the models and drafters in ``kept`` (the target among them) and their
    acceptance by the target (an engine's or a runtime's scope: planner/export, planner/schedule)."""
    target = profile.target.id
    return replace(profile, models=tuple(m for m in profile.models if m.id in kept),
                   retrieval=tuple(r for r in profile.retrieval if r.id in kept),
                   acceptance=tuple(a for a in profile.acceptance if a.drafter in kept and a.verifier == target))


def batch_sizes(profile: "Profile") -> tuple[int, ...]:
    """Every batch size the target has a latency curve for, ascending (``(1,)`` for a version-1 profile)."""
    return tuple(sorted({curve.batch for curve in profile.target.latency}))


def schema_version_of(profile: "Profile") -> int:
    """The lowest profile.yaml version that holds ``profile``: 2 if some curve has batch > 1, else 1."""
    batched = any(curve.batch != 1 for model in profile.models for curve in model.latency)
    return BATCHED_VERSION if batched else 1


def _shape(raw: dict[str, Any] | None, where: str) -> ModelShape | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ProfileError(f"{where}.shape must be a mapping (layers, hidden, heads, ...); regenerate the profile")
    values = {k: v for k, v in raw.items() if k in ModelShape.__annotations__}
    for key in ("layers", "hidden", "heads", "kv_heads", "head_dim", "vocab", "intermediate", "parameters",
                "extra_weights"):
        if key in values:
            name = f"{where}.shape.{key}"
            values[key] = (check_parameters(values[key], name) if key in ("parameters", "extra_weights")
                           else _count(values[key], name, 1))
    values["tied_embeddings"] = bool(values.get("tied_embeddings", True))
    values["source"] = str(values.get("source", "config"))
    return ModelShape(**values)


def check_parameters(value: Any, where: str) -> int:
    """A weight count (may exceed :data:`LARGEST_COUNT`)."""
    try:
        return check_count(value, where, 0, 10**15)
    except ValueError as error:
        raise ProfileError(f"{error}; fix the profile or re-profile") from None


def shape_from_config(config: Any, layers: int | None = None, parameters: int = 0) -> ModelShape | None:
    """A :class:`ModelShape` from a Hugging Face config object (read by attribute, no torch).

    ``layers`` overrides ``num_hidden_layers`` (a layer-skip view keeps fewer). Returns None
    when the config lacks the fields of a decoder-only transformer.
    """
    try:
        heads = int(config.num_attention_heads)
        hidden = int(config.hidden_size)
        head_dim = int(getattr(config, "head_dim", None) or hidden // heads)
        return ModelShape(
            layers=int(layers if layers is not None else config.num_hidden_layers),
            hidden=hidden,
            heads=heads,
            kv_heads=int(getattr(config, "num_key_value_heads", None) or heads),
            head_dim=head_dim,
            vocab=int(config.vocab_size),
            intermediate=int(config.intermediate_size),
            tied_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
            parameters=int(parameters),
        )
    except (AttributeError, TypeError, ValueError, ZeroDivisionError):
        return None


def shape_of_network(network: Any) -> ModelShape | None:
    """The shape of a causal-LM module: its config, with the decoder layers it actually holds
    (``network.model.layers``; a layer-skip view holds fewer than its config says)."""
    layers = getattr(getattr(network, "model", None), "layers", None)
    return shape_from_config(getattr(network, "config", None), len(layers) if layers is not None else None)


def _acceptance(raw: dict[str, Any], index: int) -> AcceptanceEntry:
    where = f"acceptance[{index}]"
    entry = AcceptanceEntry(
        drafter=str(raw["drafter"]),
        verifier=str(raw["verifier"]),
        temperature=_finite(raw.get("temperature", 0.0), f"{where}.temperature"),
        alpha=_probability(raw["alpha"], f"{where}.alpha"),
        gamma=_count(raw.get("gamma", 0), f"{where}.gamma"),
        accepted_hist=tuple(_count(v, f"{where}.accepted_hist") for v in raw.get("accepted_hist") or ()),
        rank_accept=tuple(_probability(v, f"{where}.rank_accept") for v in raw.get("rank_accept") or ()),
        retrieval_rank_accept=tuple(
            _probability(v, f"{where}.retrieval_rank_accept") for v in raw.get("retrieval_rank_accept") or ()
        ),
        samples=_count(raw.get("samples", 0), f"{where}.samples"),
        drafted_hist=tuple(_count(v, f"{where}.drafted_hist") for v in raw.get("drafted_hist") or ()),
        per_prompt=tuple(_prompt_counts(c, f"{where}.per_prompt[{i}]") for i, c in enumerate(raw.get("per_prompt") or ())),
    )
    longest = len(entry.accepted_hist)
    if any(len(c.hist) > longest or len(c.censored) > longest or len(c.drafted_hist) > longest
           or len(c.rank_hits) > len(entry.rank_accept) for c in entry.per_prompt):
        raise ProfileError(f"{where}.per_prompt counts rounds longer than accepted_hist or ranks beyond rank_accept; "
                           "re-profile")
    if entry.drafted_hist and len(entry.drafted_hist) != len(entry.accepted_hist):
        raise ProfileError(f"{where}.drafted_hist has {len(entry.drafted_hist)} counts and accepted_hist "
                           f"{len(entry.accepted_hist)}; both count rounds by length 0..gamma: re-profile")
    return entry


def _prompt_counts(raw: Any, where: str) -> PromptCounts:
    if not isinstance(raw, dict):
        raise ProfileError(f"{where} must be a mapping of counts; re-profile")
    return PromptCounts(**{key: tuple(_count(v, f"{where}.{key}") for v in raw.get(key) or ())
                           for key in ("hist", "censored", "drafted_hist", "rank_hits")},
                        positions=_count(raw.get("positions", 0), f"{where}.positions"))


def _device(raw: Any) -> DeviceInfo:
    if not isinstance(raw, dict):
        raise ProfileError("device must be a mapping with kind, name and sku; regenerate it with `specplan profile`")
    missing = [key for key in ("kind", "name", "sku") if key not in raw]
    if missing:
        raise ProfileError(f"device lacks {', '.join(missing)}; regenerate it with `specplan profile`")
    device = DeviceInfo(**{k: str(v) for k, v in raw.items() if k in DeviceInfo.__annotations__})
    if device.numerics not in NUMERICS:
        raise ProfileError(f"device numerics {device.numerics!r} is not one of exact, fast; fix it or re-profile")
    return device


def _mapping(document: dict[str, Any], key: str) -> dict[str, Any]:
    value = document.get(key) or {}
    if not isinstance(value, dict):
        raise ProfileError(f"{key} must be a mapping, got {value!r}; fix the profile or re-profile")
    return dict(value)


def _check_unique(models: tuple[ModelEntry, ...], retrieval: tuple[RetrievalEntry, ...]) -> None:
    seen: set[str] = set()
    for name in [m.id for m in models] + [r.id for r in retrieval]:
        if name in seen:
            raise ProfileError(f"the id {name!r} appears twice in models/retrieval; each model and drafter needs its own id")
        seen.add(name)


def profile_from_dict(document: dict[str, Any]) -> Profile:
    """Build a :class:`Profile` from a parsed YAML mapping; raise ProfileError naming the bad field."""
    version = document.get("schema_version", 1)
    try:
        device = _device(document["device"])
        models = tuple(
            ModelEntry(
                id=str(m["id"]),
                source=str(m["source"]),
                fingerprint=str(m.get("fingerprint", "")),
                quant=str(m.get("quant", "none")),
                dtype=str(m.get("dtype", "float32")),
                role=str(m.get("role", "drafter")),
                latency=_curves(m.get("latency"), f"models[{m['id']}].latency", version),
                base=m.get("base"),
                mode=str(m.get("mode", "eager")),
                shape=_shape(m.get("shape"), f"models[{m['id']}]"),
                batch_overhead=_overheads(m.get("batch_overhead"), f"models[{m['id']}].batch_overhead", version),
                wide_from=_count(m.get("wide_from", 0), f"models[{m['id']}].wide_from"),
                engine_plain_ms=_finite(m.get("engine_plain_ms", 0.0), f"models[{m['id']}].engine_plain_ms"),
                flash_attention=_flash_attention(m.get("flash_attention", ""), f"models[{m['id']}].flash_attention"),
            )
            for m in document["models"]
        )
        retrieval = tuple(
            RetrievalEntry(str(r["id"]), str(r["source"]), _finite(r["ms_per_call"], f"retrieval[{r['id']}].ms_per_call"))
            for r in document.get("retrieval") or ()
        )
        acceptance = tuple(_acceptance(a, i) for i, a in enumerate(document.get("acceptance") or ()))
    except ProfileError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ProfileError(f"profile is missing or has a malformed field ({exc}); regenerate it with `specplan profile`") from None
    if not models:
        raise ProfileError("profile lists no models; regenerate it with `specplan profile`")
    _check_unique(models, retrieval)
    profile = Profile(
        device=device,
        models=models,
        acceptance=acceptance,
        retrieval=retrieval,
        created=str(document.get("created", "")),
        software={str(k): str(v) for k, v in _mapping(document, "software").items()},
        calibration=_mapping(document, "calibration"),
        prediction=calibration_from_dict(document.get("prediction"), ProfileError),
    )
    profile.target  # noqa: B018 - validates that a target exists
    return profile


def profile_to_dict(profile: Profile) -> dict[str, Any]:
    """The YAML mapping of a profile, ``schema_version`` first."""
    document = asdict(profile)
    document.pop("schema_version")
    document = {"schema_version": schema_version_of(profile), **document}
    if not document["device"]["numerics"]:
        del document["device"]["numerics"]  # torch: profiles read as before
    for model in document["models"]:
        for curve in model["latency"]:
            curve["n"], curve["ms"] = list(curve["n"]), [round(v, 4) for v in curve["ms"]]
            if curve["batch"] == 1:
                del curve["batch"]  # batch 1 is the default: a batch-1 profile reads as version 1 did
        model["latency"] = list(model["latency"])
        if model["batch_overhead"]:
            model["batch_overhead"] = [{**curve, "n": list(curve["n"]), "ms": [round(v, 4) for v in curve["ms"]]}
                                       for curve in model["batch_overhead"]]
        else:
            del model["batch_overhead"]  # only batched profiles carry it: others read as before
        if not model["wide_from"]:
            del model["wide_from"]  # only llama.cpp targets with wide verifies: others read as before
        if not model["engine_plain_ms"]:
            del model["engine_plain_ms"]  # only llama.cpp targets: others read as before
        if not model["flash_attention"]:
            del model["flash_attention"]  # only where the profile turned it off: others read as before
        if model.get("shape") is None:
            model.pop("shape", None)
        elif not model["shape"]["extra_weights"]:
            del model["shape"]["extra_weights"]  # plain decoders: profiles read as before
    for entry in document["acceptance"]:
        for key in ("accepted_hist", "rank_accept", "retrieval_rank_accept"):
            entry[key] = [round(v, 6) if isinstance(v, float) else v for v in entry[key]]
        entry["alpha"] = round(entry["alpha"], 6)
        if entry["drafted_hist"]:
            entry["drafted_hist"] = list(entry["drafted_hist"])
        else:
            del entry["drafted_hist"]  # model drafters always draft gamma: profiles read as before
        entry["per_prompt"] = [{key: list(value) if isinstance(value, tuple) else value
                                for key, value in counts.items() if value}
                               for counts in entry["per_prompt"]]
        if not entry["per_prompt"]:
            del entry["per_prompt"]  # profiles from before per-prompt counts read as before
    if profile.prediction is None:
        del document["prediction"]  # profiles without predictions read as before, by any reader
    else:
        document["prediction"] = calibration_to_dict(profile.prediction)
    document["models"] = list(document["models"])
    document["acceptance"] = list(document["acceptance"])
    document["retrieval"] = list(document["retrieval"])
    return document


def carried_part(profile: Profile) -> Profile:
    """What a plan carries of the profile it was solved from, so that the plan alone runs (``run``, ``serve``,
    ``bench``, ``export``: core/contract.py ``load_plan_and_profile``): the device and numerics, every model's
    latency curves and settings, the drafters, and the acceptance the planner re-costs a plan with; without
    the per-prompt counts and a prediction's replay, which only ``plan`` reads (a few KB instead of up to 100)."""
    acceptance = tuple(replace(entry, per_prompt=()) for entry in profile.acceptance)
    return replace(profile, acceptance=acceptance, prediction=None)


def load_profile(path: str | Path) -> Profile:
    """Read and validate a profile; every error names the file."""
    document = read_document(path, "profile", ProfileError, PROFILE_VERSIONS)
    try:
        return profile_from_dict(document)
    except ProfileError as error:
        raise ProfileError(f"{path}: {error}") from None


def save_profile(profile: Profile, path: str | Path) -> None:
    write_document(path, profile_to_dict(profile))

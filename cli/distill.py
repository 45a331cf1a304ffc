"""``specplan distill TARGET [-o DIR] [--kind model] [--budget-minutes M] [--seed S]``.

Trains a few-layer drafter for TARGET from the target's own outputs on the Spec-Bench
calibration split (FastDraft-style self-distillation, arXiv 2411.11055) and saves it as a
Hugging Face checkpoint for ``--drafter model:DIR``; or (``--kind head``) an EAGLE-style draft
head over the target's hidden states (arXiv 2401.15077) with a trimmed vocabulary (``--vocab``,
arXiv 2603.05210) for ``--drafter head:DIR``. Rerunning into the same DIR reuses the cached
target outputs and resumes training from the last checkpoint.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from specplan.core.errors import SpecplanError
from specplan.core.files import read_json_object
from specplan.core.outputs import check_output_folder
from specplan.cli.options import PROMPTS, SEED, THREADS, integer, number


def add_parser(commands) -> None:
    """Register the ``distill`` subcommand on argparse ``commands``."""
    parser = commands.add_parser("distill", help="train a small drafter for TARGET from its own outputs (CPU, minutes)")
    parser.add_argument("target", nargs="?", default="default", help="MODEL: `default`, a .gguf file, a directory or a hub id")
    parser.add_argument("-o", "--output", default=None, help="checkpoint directory (default: the specplan cache)")
    parser.add_argument("--kind", default="model", choices=["model", "head"],
                        help="model: a few-layer copy of the target; head: one layer over the target's hidden states (EAGLE)")
    parser.add_argument("--vocab", type=integer(0, 10_000_000), default=8192,
                        help="head only: tokens kept in the drafter's vocabulary, most frequent first (0 = all)")
    parser.add_argument("--layout", default="eagle1", choices=["eagle1", "eagle3"],
                        help="head only: eagle1 (fuse + decoder layer) or eagle3 (EAGLE-3's layer, which "
                             "`specplan export --engine vllm|sglang` writes as the engines' checkpoint)")
    parser.add_argument("--budget-minutes", type=number(0.0, 10080.0, above_low=True), default=20.0, help="stop training after this much wall time")
    parser.add_argument("--seed", type=SEED, default=0)
    parser.add_argument("--steps", type=integer(1, 10_000_000), default=None, help="optimizer steps (default 300)")
    parser.add_argument("--learning-rate", type=number(0.0, 10.0, above_low=True), default=None, help="AdamW peak learning rate (default 1e-3)")
    parser.add_argument("--layers", default="4", help="drafter layers: a count K (the target's first K) or a list such as 0,1,28,29")
    parser.add_argument("--train-limit", type=PROMPTS, default=None, help="calibration prompts to train on (default 80: all but the 40 that profile measures on)")
    parser.add_argument("--sampled", type=integer(0, 64), default=None, help="sampled continuations per prompt besides the greedy one")
    parser.add_argument("--self-prompts", type=integer(0, 1_000_000), default=None,
                        help="extra prompts the target writes itself and answers (more varied training text; default 0)")
    parser.add_argument("--answer-tokens", type=integer(1, 32768), default=None,
                        help="longest target answer per training prompt, in tokens (default 128)")
    parser.add_argument("--weight-decay", type=number(0.0, 10.0), default=None, help="AdamW weight decay (default 0)")
    parser.add_argument("--eval-limit", type=integer(0, 1_000_000), default=None, help="evaluation prompts to score on (default 12; 0 skips)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--threads", type=THREADS, default=None,
                        help="torch CPU threads (on a shared machine 1 avoids thrashing; default: torch's choice)")
    parser.add_argument("--restart", action="store_true", help="discard the checkpoint in DIR and train from the start")
    parser.set_defaults(handler="distill")


def distill_config(args, num_target_layers: int):
    """The run's DistillConfig from the parsed arguments (defaults where a flag is absent)."""
    from specplan.distill.config import DistillConfig
    from specplan.distill.init import parse_layers

    base = DistillConfig()
    data = dataclasses.replace(base.data, **{key: value for key, value in
                                             (("train_limit", args.train_limit), ("sampled_per_prompt", args.sampled),
                                              ("self_prompts", args.self_prompts),
                                              ("max_new_tokens", args.answer_tokens)) if value is not None})
    optional = {key: value for key, value in (("steps", args.steps), ("learning_rate", args.learning_rate),
                                                      ("weight_decay", args.weight_decay)) if value is not None}
    train = dataclasses.replace(base.train, seed=args.seed, budget_minutes=args.budget_minutes, **optional)
    evaluation = dataclasses.replace(base.evaluation, **({"eval_limit": args.eval_limit} if args.eval_limit else {}))
    layers = parse_layers(str(args.layers), num_target_layers) if args.kind == "model" else ()
    return DistillConfig(kind=args.kind, layers=layers, num_layers=len(layers), data=data, train=train, evaluation=evaluation)


def _default_output(target_source: str, config) -> Path:
    from specplan.models.load import cache_root

    stem = Path(target_source.rstrip("/")).name.removesuffix(".gguf") or "target"
    kind = "head" if config.kind == "head" else f"{len(config.layers)}l"
    return cache_root() / "drafters" / f"{stem}-{kind}-seed{config.train.seed}"


def _print_report(report) -> None:
    result = report.result
    print(f"specplan: trained {result.step} steps in {result.seconds:.0f} s (stopped by {result.stopped_by}); "
          f"target outputs took {report.data_seconds:.0f} s")
    if report.scores:
        print(f"specplan: greedy agreement with the target on {len(report.eval_prompt_ids)} held-out evaluation prompts; "
              f"target T(1) = {report.target_t1_ms:.1f} ms")
        for score in report.scores:
            ranks = ", ".join(f"{value:.3f}" for value in score.rank_accept[:4])
            print(f"  {score.name:<24} alpha {score.alpha:.3f}  top-1 {score.top1:.3f}  ranks [{ranks}]  T(1) {score.t1_ms:.1f} ms")
    if hasattr(report, "kept_vocabulary"):
        print(f"specplan: drafter vocabulary {report.kept_vocabulary} tokens, covering {report.eval_coverage:.3f} "
              "of the target's held-out tokens")
    kind = "head" if hasattr(report, "kept_vocabulary") else "model"
    print(f"specplan: wrote {report.output} (use it with --drafter {kind}:{report.output})")


def command(args) -> int:
    """Distill, evaluate and print where the drafter is; 0 on success."""
    if args.output:
        check_output_folder(args.output, flag="-o")
    from specplan.distill.pipeline import check_output, run_distill
    from specplan.models.load import quiet_transformers, resolve_model_dir
    from specplan.runtime.timing import pick_device

    quiet_transformers()
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    target_dir = resolve_model_dir(args.target)
    config_path = Path(target_dir) / "config.json"
    layers_total = (read_json_object(config_path, "pass a model directory with a valid config.json", SpecplanError)
                    .get("num_hidden_layers", 0) if config_path.is_file() else 0)
    if not layers_total:
        raise SpecplanError(f"cannot read the layer count of {args.target!r}; pass a local model directory, a .gguf file or `default`")
    config = distill_config(args, layers_total)
    output = Path(args.output) if args.output else _default_output(args.target, config)
    check_output(output)
    if config.kind == "head":
        from specplan.distill.head_pipeline import run_head_distill

        report = run_head_distill(args.target, output, config, device, args.vocab, restart=args.restart,
                                  evaluate=args.eval_limit != 0, layout=args.layout)
    else:
        report = run_distill(args.target, output, config, device, restart=args.restart, evaluate=args.eval_limit != 0)
    _print_report(report)
    return 0

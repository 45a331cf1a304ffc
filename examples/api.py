"""specplan from Python: load a stored profile, solve it, run the plan (the README's example).

    .venv/bin/python examples/api.py [--prompt TEXT] [--max-new-tokens N]

Uses profiles/cpu/profile.yaml (SmolLM2-135M measured on a 2-core CPU). The plan is written
next to a copy of the profile in a temporary folder, then opened with ``specplan.Runner``
(``--force`` semantics: another machine's device may differ from the stored profile's).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import specplan
from specplan.core.plan import save_plan

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", default="Fix the spelling and print the corrected sentence: Speculative decodeing "
                                            "keeps the large modle's output unchanged.")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        profile_path = Path(folder) / "profile.yaml"
        shutil.copy(ROOT / "profiles" / "cpu" / "profile.yaml", profile_path)
        profile = specplan.load_profile(profile_path)
        plan = specplan.solve(profile, profile_path=profile_path)
        plan_path = Path(folder) / "plan.yaml"
        save_plan(plan, plan_path)
        print(f"plan: {plan.summary()}, predicted {plan.predicted.tokens_per_s:.1f} tok/s")
        with specplan.Runner.open(plan_path, force=True) as runner:
            result = runner.generate(args.prompt, max_new_tokens=args.max_new_tokens, compare_plain=True)
        print(result.text)
        print(f"{result.new_tokens} tokens, {result.tokens_per_s:.1f} tok/s, {result.mean_accepted:.2f} per target "
              f"forward; {result.plain.describe(profile.target.dtype)}")


if __name__ == "__main__":
    main()

"""Fuzzed inputs: mutated profiles and plans (types, ranges, NaN/inf, parents, missing keys,
encodings) through the loaders and `plan`, `export`, `roofline`: every case either works and
writes a valid file, or is one stderr line with exit code 2 (never a traceback, never exit 1).

Seeded, so a failure reproduces; :data:`CASES` cases per file kind per run. (hypothesis is not
a dependency of specplan; this walks the same space with a seeded generator.)
"""

from __future__ import annotations

import copy
import os
import random
import shutil
from pathlib import Path

import pytest
import yaml

from specplan.cli.main import main
from specplan.core.plan import load_plan

ROOT = Path(__file__).resolve().parents[2]
CASES = int(os.environ.get("SPECPLAN_FUZZ_CASES", "40"))  # more: SPECPLAN_FUZZ_CASES=500
VALUES = (float("nan"), float("inf"), -float("inf"), -1, 0, 10**12, 2.5, "x", None, [], {}, True, "", [-1, 5, 0])


def leaves(node, path=()):
    """Every (path, value) of a parsed YAML document, containers included."""
    yield path, node
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        yield from leaves(value, (*path, key))


def mutate(document, rng: random.Random):
    """One random change: a value replaced, a key deleted or a list entry duplicated."""
    document = copy.deepcopy(document)
    paths = [path for path, _ in leaves(document) if path]
    path = rng.choice(paths)
    parent = document
    for key in path[:-1]:
        parent = parent[key]
    action = rng.random()
    if action < 0.15 and isinstance(parent, dict):
        del parent[path[-1]]
    elif action < 0.25 and isinstance(parent, list):
        parent.append(copy.deepcopy(parent[path[-1]]))
    else:
        parent[path[-1]] = rng.choice(VALUES)
    return document, path


def check(code: int, err: str, where: str) -> None:
    lines = [line for line in err.splitlines() if line.strip() and "warning" not in line]
    assert code in (0, 2), f"{where}: exit {code}: {err}"
    assert "Traceback" not in err and "internal error" not in err, f"{where}: {err}"
    if code == 2:
        assert len(lines) == 1, f"{where}: {err}"


@pytest.fixture
def folder(tmp_path, monkeypatch):
    for name in ("profile.yaml", "plan.yaml"):
        shutil.copy(ROOT / "profiles" / "cpu" / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("seed", range(CASES))
def test_mutated_profile(folder, capsys, seed):
    rng = random.Random(seed)
    document, path = mutate(yaml.safe_load((folder / "profile.yaml").read_text()), rng)
    (folder / "profile.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    for argv in (["plan", "profile.yaml", "-o", "out.yaml", "--max-budget", "8", "--max-depth", "3"],
                 ["roofline", "profile.yaml"], ["export", "plan.yaml", "--engine", "vllm", "--max-budget", "8"]):
        code = main(argv)
        check(code, capsys.readouterr().err, f"seed {seed}, {path}, {argv[0]}")
        if argv[0] == "plan" and code == 0:
            assert load_plan(folder / "out.yaml")


@pytest.mark.parametrize("seed", range(CASES))
def test_mutated_plan(folder, capsys, seed):
    rng = random.Random(1000 + seed)
    document, path = mutate(yaml.safe_load((folder / "plan.yaml").read_text()), rng)
    (folder / "plan.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    code = main(["export", "plan.yaml", "--engine", rng.choice(["vllm", "sglang", "transformers", "llama.cpp"]),
                 "--max-budget", "8"])
    check(code, capsys.readouterr().err, f"seed {seed}, {path}")


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32", "latin-1"])
def test_reencoded_files(folder, capsys, encoding):
    for name in ("profile.yaml", "plan.yaml"):
        text = (folder / name).read_text() + "# caf\u00e9\n"
        (folder / name).write_bytes(text.encode(encoding))
    for argv in (["plan", "profile.yaml", "-o", "out.yaml"], ["export", "plan.yaml", "--engine", "vllm"],
                 ["roofline", "profile.yaml"]):
        code = main(argv)
        err = capsys.readouterr().err
        check(code, err, f"{encoding}, {argv[0]}")
        assert code == 2

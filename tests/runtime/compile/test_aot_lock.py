"""Processes that need the same ahead-of-time package at once: one builds it, the others wait on its
lock and load it (runtime/compile/model_steps.py). The build itself is replaced by a fake that takes its
time and logs who built, so the test runs in seconds; the real build is tested in test_aot.py."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path

import torch

from specplan.runtime.compile import aot_store, model_steps


def _patch_store(folder: Path, log: Path) -> None:
    """aot_store with a fake build: the package is a file holding its builder's pid."""
    aot_store.package_key = lambda model, device: "key"
    aot_store.package_folder = lambda key, root=None: folder
    aot_store.stale_reason = lambda where, key, model: None if (where / "package").is_file() else "no package"

    def build(model, device, key, where):
        with open(log, "a", encoding="utf-8") as record:
            record.write(f"{os.getpid()}\n")
        time.sleep(0.5)
        where.mkdir(parents=True, exist_ok=True)
        (where / "package").write_text(str(os.getpid()), encoding="utf-8")
        return 0.5

    aot_store.build_package = build
    aot_store.load_package = lambda model, device, where: (where / "package").read_text(encoding="utf-8")
    model_steps._describe = lambda model: "a fake model"


def _need_package(folder: Path, log: Path, results) -> None:
    _patch_store(folder, log)
    results.put(model_steps.ahead_of_time_step(torch.nn.Linear(1, 1), torch.device("cpu")))


def test_four_processes_build_one_package_and_all_load_it(tmp_path, capfd):
    context = multiprocessing.get_context("fork")
    results, log, folder = context.Queue(), tmp_path / "builds.log", tmp_path / "aot" / "key"
    children = [context.Process(target=_need_package, args=(folder, log, results)) for _ in range(4)]
    start = time.perf_counter()
    for child in children:
        child.start()
    for child in children:
        child.join(60)
    seconds = time.perf_counter() - start
    assert [child.exitcode for child in children] == [0, 0, 0, 0]
    builders = log.read_text(encoding="utf-8").split()
    loaded = {results.get(timeout=5) for _ in children}
    assert len(builders) == 1 and loaded == set(builders)  # one build; every process loaded that one
    assert capfd.readouterr().err.count("waiting for another process") >= 1
    assert seconds < 30

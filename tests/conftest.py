"""Shared fixtures: tiny random Llama models (no download) and the real default model."""

from __future__ import annotations

import os

import pytest
import torch

torch.set_num_threads(min(2, os.cpu_count() or 1))


@pytest.fixture(scope="session")
def default_model_dir(tmp_path_factory) -> str:
    """The default model converted to safetensors (cached under $SPECPLAN_CACHE)."""
    from specplan.models.load import resolve_model_dir

    return resolve_model_dir("default")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, default_model_dir) -> str:
    """A tiny random Llama (hidden 32) with the default model's tokenizer, saved to disk."""
    from tests.tiny_checkpoint import save_tiny_llama

    return save_tiny_llama(tmp_path_factory.mktemp("tiny-model"), default_model_dir, hidden_size=32)


@pytest.fixture
def one_thread():
    """One torch thread: on a shared 2-core machine two threads thrash (10x slower under load)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def stored(tmp_path, monkeypatch):
    """A copy of profiles/cpu/ (profile.yaml, plan.yaml) as the working folder."""
    import shutil
    from pathlib import Path

    for name in ("profile.yaml", "plan.yaml"):
        shutil.copy(Path(__file__).resolve().parents[1] / "profiles" / "cpu" / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path

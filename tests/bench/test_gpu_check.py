"""scripts/gpu-check.sh's dry run on a machine without CUDA, and its report from profiles."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import torch
import pytest

from specplan.bench.gpu_report import main as report_main
from specplan.planner.hardware.sku import sku_of_device_name

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the dry run is for machines without CUDA")
def test_without_cuda_the_check_says_so_in_one_line_and_exits_2(tmp_path):
    result = subprocess.run(["bash", str(REPO / "scripts" / "gpu-check.sh"), str(tmp_path / "out")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no CUDA device" in lines[0]
    assert not (tmp_path / "out").exists()  # nothing written


def test_the_report_compares_curves_with_the_roofline_and_eager_with_compiled(tmp_path, capsys):
    shutil.copy(REPO / "profiles" / "cpu" / "profile.yaml", tmp_path / "latency-default-eager.yaml")
    shutil.copy(REPO / "profiles" / "cpu-compiled" / "profile.yaml", tmp_path / "latency-default-compiled.yaml")
    (tmp_path / "cuda-tests.log").write_text("4 passed in 12.0s\n")
    assert report_main([str(tmp_path)]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["cuda_tests"] == "4 passed in 12.0s"
    (row,) = report["graphs_vs_eager"]
    assert row["model"] == "default" and row["ratio"] == pytest.approx(row["eager_t1_ms"] / row["compiled_t1_ms"], rel=1e-3)
    eager = next(entry for entry in report["profiles"] if entry["mode"] == "eager")
    assert eager["roofline_sku"] == "cpu" and {point["n"] for point in eager["roofline"]} >= {1, 64}
    markdown = (tmp_path / "report.md").read_text()
    assert "| default |" in markdown and "roofline (cpu) ms" in markdown


def test_the_report_needs_a_folder(capsys):
    assert report_main(["/no/such/folder"]) == 2


@pytest.mark.parametrize("name, sku", [("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA H200", "h200"),
                                       ("NVIDIA A100-SXM4-80GB", "a100-80gb"), ("NVIDIA L40S", "l40s"),
                                       ("NVIDIA L4", "l4"), ("NVIDIA H100 PCIe", None)])
def test_a_gpu_name_maps_to_its_sku(name, sku):
    assert sku_of_device_name(name) == sku


def test_the_report_names_the_batch_of_every_point(tmp_path):
    """A profile with T(n, b) (the H200's Llama-3-8B, batches 4, 16 and 64 beside batch 1) is
    compared with the roofline at every batch, each row naming its batch."""
    shutil.copy(REPO / "profiles" / "gpu-h200" / "latency-llama-3-8b-compiled-batched-eager.yaml",
                tmp_path / "latency-llama-3-8b-compiled.yaml")
    assert report_main([str(tmp_path), "h200"]) == 0
    (entry,) = json.loads((tmp_path / "report.json").read_text())["profiles"]
    assert {row["batch"] for row in entry["roofline"]} == {1, 4, 16, 64}
    four = next(row for row in entry["roofline"] if row["batch"] == 4 and row["n"] == 1)
    assert four["measured_ms"] == pytest.approx(21.621)
    assert "| model | batch | n |" in (tmp_path / "report.md").read_text()

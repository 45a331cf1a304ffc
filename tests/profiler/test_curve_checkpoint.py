"""An interrupted ``specplan profile`` keeps its latency curves beside the output, and ``--resume``
reuses them only when they were measured under the same key (profiler/curve_checkpoint.py)."""

from __future__ import annotations

import pytest

from specplan.cli.main import main
from specplan.core.errors import ProfileError
from specplan.core.yamlio import read_document
from specplan.core.profile import LatencyCurve, load_profile
from specplan.profiler.curve_checkpoint import checkpoint_path, load_curves, save_curves

KEY = {"target": "sha256:x", "models": {"target": "default", "ngram-3": "ngram:3"}, "device": "cpu", "context": 48}
CURVE = LatencyCurve(48, (1, 2, 4), (10.0, 11.0, 12.5), "measured")


def test_curves_round_trip_under_their_key(tmp_path):
    path = checkpoint_path(tmp_path / "profile.yaml")
    assert path.name == ".profile.yaml.curves.yaml"
    save_curves(path, KEY, {"target": CURVE, "ngram-3": CURVE}, {"target": (), "ngram-3": ()})
    curves, batched = load_curves(path, KEY)
    assert curves["target"] == CURVE and batched["ngram-3"] == ()


@pytest.mark.parametrize("damage, words", [
    (lambda path: None, "another context"),
    (lambda path: path.write_text(path.read_text()[:40]), "unreadable"),
    (lambda path: path.write_text(path.read_text().replace("ms: [10.0", "ms: [-10.0")), "unreadable"),
])
def test_a_checkpoint_of_another_key_or_damaged_is_not_reused(tmp_path, damage, words):
    path = checkpoint_path(tmp_path / "profile.yaml")
    save_curves(path, KEY, {"target": CURVE, "ngram-3": CURVE}, {"target": (), "ngram-3": ()})
    damage(path)
    key = {**KEY, "context": 64} if words == "another context" else KEY
    reason = load_curves(path, key)
    assert isinstance(reason, str) and words in reason


def test_an_interrupted_profile_resumes_from_its_curves(tmp_path, tiny_model_dir, monkeypatch, capsys):
    import specplan.profiler.run as run

    output = tmp_path / "profile.yaml"
    argv = ["profile", "--target", tiny_model_dir, "--drafter", "ngram:3", "--quick", "--limit", "1", "--dtype",
            "float32", "--device", "cpu", "--context", "48", "--no-plan", "-o", str(output)]

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(run, "_target_outputs", interrupted)  # Ctrl-C after the curves, during calibration
        assert main(argv) == 130
    assert not output.exists() and checkpoint_path(output).is_file()

    def timed_again(*args, **kwargs):
        raise AssertionError("the curves were measured again")

    monkeypatch.setattr(run, "measure_latency", timed_again)
    assert main([*argv, "--resume"]) == 0
    assert "latency curves from" in capsys.readouterr().out
    assert load_profile(output).target.latency[0].context == 48 and not checkpoint_path(output).exists()


def test_a_profile_killed_after_its_curves_resumes_in_a_new_process(tmp_path, tiny_model_dir):
    """SIGKILL (no cleanup runs) once the checkpoint exists: no profile file, a whole checkpoint;
    a new process with --resume writes the profile from it and removes it."""
    import os
    import signal
    import subprocess
    import sys
    import time

    output = tmp_path / "profile.yaml"
    argv = [sys.executable, "-c", "import sys; from specplan.cli.main import main; sys.exit(main(sys.argv[1:]))",
            "profile", "--target", tiny_model_dir, "--drafter", "ngram:3", "--quick", "--limit", "2", "--dtype",
            "float32", "--device", "cpu", "--context", "48", "--no-plan", "-o", str(output)]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not checkpoint_path(output).is_file() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(process.pid, signal.SIGKILL)
    process.wait(30)
    if output.exists():  # the whole profile finished before the kill landed: nothing to resume
        pytest.skip("the profile finished before SIGKILL")
    document = read_document(checkpoint_path(output), "curve checkpoint", ProfileError)  # whole: written atomically
    assert set(document["curves"]) == {"target"} and document["key"]["context"] == [48]
    resumed = subprocess.run([*argv, "--resume"], capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert "latency curves from" in resumed.stdout and not checkpoint_path(output).exists()
    assert load_profile(output).target.latency[0].context == 48

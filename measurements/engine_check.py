"""vLLM runs the exports: every stored profile's ``specplan export --engine vllm`` checked by vLLM's own
code, and a bounded set of them started as servers on 127.0.0.1 on this CPU and measured.

scripts/check-engines.sh installs the pinned vLLM CPU build into a throwaway environment and runs
this file with specplan's interpreter; it is never on CI's path. Two parts:

1. **Config check**, every exportable stored profile: the printed ``--speculative-config`` (models
   renamed from their Hugging Face ids to the local folders specplan converts the GGUFs into) is built
   by vLLM's ``EngineArgs.create_engine_config`` in vLLM's environment
   (``measurements/engine_interfaces.py check``): accepted, changed (which values) or rejected (vLLM's
   message).
2. **Server runs** (``--runs``, profile folder names; ``plain:<folder>`` for the same target with no
   speculative option): vLLM's OpenAI server started with the export's flags, ``--max-model-len 4096``,
   on a free port, with the environment vLLM's CPU guide asks for (libiomp5 preloaded) and its compute
   bound to ``--threads`` cores (2, as every other engine here runs); a run that
   exits while loading is reported with vLLM's last error line. Each run answers the same requests
   (the profile's calibration workload, evaluation split: calibrated on one split, evaluated on
   the other) through the ``openai`` client, streamed, greedy, as measurements/serve_http.py sends
   them; acceptance is read from vLLM's own ``/metrics`` (``vllm:spec_decode_*``). The measured
   speedup is a run's pooled decode tokens/s over its plain run's; the export's prediction is
   printed beside it, with its tokens per target forward.

    .venv/bin/python measurements/engine_check.py --vllm-python ~/.cache/specplan/engines/vllm/bin/python \
        --runs plain:cpu-qwen-llamacpp-edit,cpu-qwen-llamacpp-edit --limit 8 --max-tokens 128 --out /tmp/engine-check
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "measurements"))
from export_table import export_stored, stored_profiles  # noqa: E402
from serve_http import measure, summary  # noqa: E402

from specplan.bench.llama_server_peer import free_port  # noqa: E402
from specplan.core.profile import load_profile  # noqa: E402
from specplan.core.workloads import workload_split  # noqa: E402
from specplan.models.load import resolve_model_dir  # noqa: E402
from specplan.planner.export.models import HUB_IDS  # noqa: E402
from specplan.planner.export.pasted import not_exportable  # noqa: E402

METRIC = re.compile(r"^(vllm:spec_decode_num_(?:drafts|draft_tokens|accepted_tokens)_total)\{[^}]*\} (\S+)$", re.M)
START_TIMEOUT_S = 900


def local_model(name: str) -> str:
    """The local folder for a model an export names by its Hugging Face id (the GGUF specplan converts)."""
    hub_sources = {hub: source for source, hub in HUB_IDS.items()}
    return resolve_model_dir(hub_sources.get(name, name))


def export_case(path: Path) -> dict | None:
    """The vLLM export of one stored profile with local model folders; None when it cannot be exported."""
    profile = load_profile(path)
    if not_exportable(profile):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pasted = export_stored(path, "vllm")
    words = pasted.config.split("--speculative-config", 1)
    config = json.loads(words[1].strip().strip("'")) if len(words) == 2 else None
    if config and "model" in config:
        config["model"] = local_model(config["model"])
    plan = pasted.result.restricted.plan
    return {"key": path.parent.name, "command": pasted.config, "model": resolve_model_dir(profile.target.source),
            "speculative_config": config, "workload": profile.calibration["prompts"].split(":")[0],
            "predicted_speedup": plan.predicted.speedup,
            "predicted_per_forward": plan.predicted.accepted_per_target_forward}


def sglang_case(path: Path) -> dict | None:
    """The SGLang export of one stored profile as the flags after ``sglang.launch_server``, models local."""
    if not_exportable(load_profile(path)):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        words = shlex.split(export_stored(path, "sglang").config)[3:]
    for flag in ("--model-path", "--speculative-draft-model-path"):
        if flag in words:
            index = words.index(flag) + 1
            words[index] = local_model(words[index])
    return {"key": path.parent.name, "argv": words}


def check_configs(python: Path, engine: str, cases: list[dict]) -> dict[str, dict]:
    """Every case built by the engine's own config code (in its environment), by key."""
    fields = ("key", "argv") if engine == "sglang" else ("key", "model", "speculative_config")
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump([{key: case[key] for key in fields} for case in cases], handle)
    done = subprocess.run([str(python), str(ROOT / "measurements/engine_interfaces.py"), "check", engine,
                           handle.name], capture_output=True, text=True, timeout=1800, env=engine_environment())
    os.unlink(handle.name)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise SystemExit(f"{engine}'s config check failed: {done.stderr.strip().splitlines()[-1:]}")
    return {result["key"]: result for result in json.loads(lines[-1][len("RESULT "):])}


def sglang_table(cases: list[dict], checks: dict[str, dict]) -> list[str]:
    """One row per profile: the SGLang flags exported and what SGLang's own argument checks made of them."""
    lines = ["| profile | SGLang export (speculative flags) | SGLang's argument checks |", "|---|---|---|"]
    for case in cases:
        check = checks[case["key"]]
        flags = " ".join(word for word in case["argv"] if "/" not in word and word != "--model-path") or "(none)"
        verdict = check["verdict"] + (" " + json.dumps(check["changed"]) if check.get("changed") else "")
        verdict += (": " + check["message"][:200]) if check["verdict"] == "rejected" else ""
        lines.append(f"| {case['key']} | `{flags}` | {verdict} |")
    return lines


def engine_environment(threads: int = 2) -> dict[str, str]:
    """For the engines' processes: no hub, no usage reports; for vLLM a 4 GiB KV cache and compute on cores
    0..threads-1 with none reserved (by default it keeps one core of two for its front end)."""
    return dict(os.environ, HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1",
                VLLM_CPU_KVCACHE_SPACE="4", TOKENIZERS_PARALLELISM="false",
                VLLM_CPU_OMP_THREADS_BIND=f"0-{threads - 1}", VLLM_CPU_NUM_OF_RESERVED_CPU="0")


class VllmServer:
    """vLLM's OpenAI server for one case on a free port of 127.0.0.1, stopped by SIGTERM to its group."""

    def __init__(self, vllm_python: Path, case: dict, log: Path, threads: int):
        self.port = free_port()
        command = [str(vllm_python), "-m", "vllm.entrypoints.openai.api_server", "--model", case["model"],
                   "--served-model-name", "specplan", "--host", "127.0.0.1", "--port", str(self.port),
                   "--max-model-len", "4096"]
        if case["speculative_config"]:
            command += ["--speculative-config", json.dumps(case["speculative_config"])]
        environment = engine_environment(threads)
        iomp = Path(vllm_python).parents[1] / "lib" / "libiomp5.so"
        if iomp.is_file():
            environment["LD_PRELOAD"] = str(iomp)
        self.log = log
        with log.open("wb") as handle:
            self.process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=environment,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        self.base_url = f"http://127.0.0.1:{self.port}"

    def wait_ready(self) -> str:
        """'' once /health answers 200; otherwise vLLM's last error line (it exited or never came up)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return self.last_error() or f"exited with code {self.process.returncode}"
            try:
                with urllib.request.urlopen(self.base_url + "/health", timeout=5) as reply:
                    if reply.status == 200:
                        return ""
            except OSError:
                pass
            time.sleep(1)
        return f"no answer on /health within {START_TIMEOUT_S} s"

    def last_error(self) -> str:
        lines = self.log.read_text(errors="replace").splitlines()
        errors = [line.strip() for line in lines if re.search(r"Error|ERROR", line)]
        return (errors or lines or [""])[-1][:400]

    def spec_metrics(self) -> dict[str, float]:
        with urllib.request.urlopen(self.base_url + "/metrics", timeout=30) as reply:
            text = reply.read().decode()
        return {name.split("num_")[1].removesuffix("_total"): float(value) for name, value in METRIC.findall(text)}

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def run_case(vllm_python: Path, case: dict, prompts, max_tokens: int, out: Path, threads: int) -> dict:
    """Start vLLM with the case, send the prompts, stop it; what it said and measured."""
    name = case["run"]
    print(f"{name}: vllm serve {Path(case['model']).name} {json.dumps(case['speculative_config'] or {})}", flush=True)
    started = time.monotonic()
    server = VllmServer(vllm_python, case, out / f"{name.replace(':', '-')}.log", threads)
    try:
        error = server.wait_ready()
        if error:
            return {"run": name, "started": False, "message": error}
        start_s = time.monotonic() - started
        rows, wall = measure(server.base_url + "/v1", prompts, max_tokens, 1, False)
        metrics = server.spec_metrics()
    finally:
        server.stop()
    result = {"run": name, "started": True, "start_s": start_s, "summary": summary(rows, wall), "rows": rows,
              "metrics": metrics}
    print("  " + json.dumps({"start_s": round(start_s), "decode_pooled": round(result["summary"]["decode_pooled"], 2),
                             **metrics}), flush=True)
    return result


def table(cases: dict[str, dict], checks: dict[str, dict], runs: list[dict]) -> list[str]:
    """The markdown rows: per profile its check, and per run its start, speed and acceptance."""
    lines = ["| profile | vLLM export (`--speculative-config`) | vLLM's config code | started | decode tok/s | "
             "measured speedup | predicted | tokens per target forward (measured / predicted) |",
             "|---|---|---|---|---:|---:|---:|---|"]
    by_run = {run["run"]: run for run in runs}
    for key, case in cases.items():
        check = checks.get(key, {})
        verdict = check.get("verdict", "-")
        if verdict == "changed":
            verdict += " " + json.dumps(check["changed"])
        if verdict == "rejected":
            verdict += ": " + check["message"][:160]
        run = by_run.get(key)
        plain = by_run.get(f"plain:{key}") or next((r for n, r in by_run.items() if n.startswith("plain:")
                                                    and cases[n[6:]]["model"] == case["model"]
                                                    and cases[n[6:]]["workload"] == case["workload"]), None)
        config = json.dumps(case["speculative_config"]) if case["speculative_config"] else "(none: plain decoding)"
        cells = ["-", "-", "-", "-"]
        if run is not None and not run["started"]:
            cells = ["no: " + run["message"][:160], "-", "-", "-"]
        elif run is not None:
            rate = run["summary"]["decode_pooled"]
            measured = f"{rate / plain['summary']['decode_pooled']:.2f}x" if plain and plain.get("started") else "-"
            drafts = run["metrics"].get("drafts", 0)
            per_forward = f"{1 + run['metrics'].get('accepted_tokens', 0) / drafts:.2f}" if drafts else "1.00"
            cells = [f"yes ({run['start_s']:.0f} s)", f"{rate:.2f}", measured,
                     f"{per_forward} / {case['predicted_per_forward']:.2f}"]
        lines.append(f"| {key} | `{config}` | {verdict} | {cells[0]} | {cells[1]} | {cells[2]} | "
                     f"{case['predicted_speedup']:.2f}x | {cells[3]} |")
    for name, run in by_run.items():
        if name.startswith("plain:") and run.get("started"):
            lines.append(f"| {name} | (none: plain decoding) | - | yes ({run['start_s']:.0f} s) | "
                         f"{run['summary']['decode_pooled']:.2f} | 1.00x | 1.00x | 1.00 / 1.00 |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-python", type=Path, default=Path.home() / ".cache/specplan/engines/vllm/bin/python")
    parser.add_argument("--sglang-python", type=Path, default=None,
                        help="an interpreter with SGLang installed: check every SGLang export with its own code")
    parser.add_argument("--runs", default="", help="comma-separated profile folders to serve; plain:<folder> "
                        "serves that profile's target with no speculative option")
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2, help="cores vLLM computes on (bound 0..N-1)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/engine-check"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    cases = {case["key"]: case for case in map(export_case, stored_profiles(ROOT)) if case is not None}
    print(f"checking {len(cases)} vLLM exports with vLLM's own config code", flush=True)
    checks = check_configs(args.vllm_python, "vllm", list(cases.values()))
    if args.sglang_python is not None:
        sglang_cases = [case for case in map(sglang_case, stored_profiles(ROOT)) if case is not None]
        print(f"checking {len(sglang_cases)} SGLang exports with SGLang's own argument checks", flush=True)
        sglang_checks = check_configs(args.sglang_python, "sglang", sglang_cases)
        (args.out / "sglang.json").write_text(json.dumps({"cases": sglang_cases, "checks": sglang_checks}, indent=1))
        print("\n".join(sglang_table(sglang_cases, sglang_checks)), flush=True)
    runs = []
    for name in filter(None, args.runs.split(",")):
        case = dict(cases[name.removeprefix("plain:")], run=name)
        if name.startswith("plain:"):
            case["speculative_config"] = None
        prompts = workload_split(case["workload"], "evaluation")[:args.limit]
        runs.append(run_case(args.vllm_python, case, prompts, args.max_tokens, args.out, args.threads))
        (args.out / "results.json").write_text(json.dumps({"checks": checks, "runs": runs}, indent=1))
    (args.out / "results.json").write_text(json.dumps({"checks": checks, "runs": runs, "cases": cases}, indent=1))
    print("\n".join(table(cases, checks, runs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

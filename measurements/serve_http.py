"""One client for every server: ``specplan serve`` and llama-server, driven over HTTP by the official
``openai`` package with the same chat requests, one server at a time on 127.0.0.1, each stopped after.

Servers (``--servers``, comma-separated):

- ``serve``: ``specplan serve PLAN --parallel C`` at concurrency C (the requests' rounds decoded together);
  ``serve-turns``: ``--parallel 1`` (one request at a time); ``serve-prediction``: ``serve`` with each edit
  request sending the function it asks to edit as OpenAI's ``prediction`` (humaneval-edit only); ``serve-alt``:
  ``serve`` of another checkout of specplan (``--alt-code DIR``: its ``PYTHONPATH``), to compare two versions;
- ``llama-server``: plain decoding (``--spec-type none``); ``llama-server-draft``: its ``draft-simple`` with the
  profile's ``model:`` drafter at llama.cpp's defaults; ``llama-server-ngram``: ``ngram-simple`` at its defaults;
- ``exported``: the command ``specplan export PLAN --engine llama.cpp`` prints, as printed (plus the address,
  threads, context and slots);

every llama-server with ``-np C`` at concurrency C, weight repacking as the plan's numerics have it. Each
request streams (``stream_options.include_usage``): time to first token, latency, and its decode rate:
the tokens after the first chunk over the time after the first chunk. The first chunk's tokens are
counted by the target's tokenizer over its text: llama-server's first chunk is the one token its prompt
batch yields, but a specplan round commits a whole verified chain at once (up to 64 tokens, the first
round included), and counting those as decoded while their forward's time falls in the TTFT would credit
specplan with tokens it made before the clock starts (the decode rates of this script before 2026-11-30
did). Per server and concurrency: the median of the per-request decode rates, the pooled decode rate,
the end-to-end rate (all tokens over all the requests' latencies: prefill and first chunk included),
TTFT and latency p50 / p95, aggregate tokens/s (all tokens over the wall time of the batch), and whether
the greedy answers equal the same server's at concurrency 1; for ``serve`` above concurrency 1 with ``--rounds``,
``forward_share``: the share of the wall time its batched decodes took (``/metrics``). With ``--rounds R``
the servers run side by side, every one frozen (SIGSTOP) but the one measured: the prompts go in R chunks, each chunk to every server
in turn, so that the ratios come from one interleaved run (a shared machine's slow minutes fall on
every server alike; separate runs of one server here move by about 4%).

    .venv/bin/python measurements/serve_http.py --plan profiles/transfer-qwen/plan-edit/plan.yaml \
        --workload humaneval-edit --limit 40 --max-tokens 128 --concurrency 1 \
        --servers serve,serve-prediction,llama-server,llama-server-draft,llama-server-ngram,exported \
        --out /tmp/serve-http
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
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import openai

from specplan.bench.llama_server_peer import (LlamaServer, drafter_gguf, parse_peer, server_binary, server_command)
from specplan.core.contract import load_plan_and_profile
from specplan.core.workloads import workload_split
from specplan.runtime.llama_cpp_session import engine_repacks

CODE = re.compile(r"```python\n(.*?)\n```", re.DOTALL)
START = re.compile(r"at (http://\S+/v1);")


class SpecplanServer:
    """``specplan serve PLAN`` on a free port, stopped by SIGTERM."""

    def __init__(self, plan: Path, threads: int, parallel: int = 1, code: Path | None = None):
        command = [str(Path(sys.executable).parent / "specplan"), "serve", str(plan), "--port", "0",
                   "--threads", str(threads), "--queue", "64", "--parallel", str(parallel)]
        environment = {**os.environ, "PYTHONPATH": str(code)} if code is not None else None  # another checkout's specplan
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                        env=environment)
        line = self.process.stdout.readline()
        match = START.search(line)
        if match is None:
            self.process.kill()
            raise SystemExit(f"specplan serve did not start: {line!r} {self.process.stderr.read()[-1000:]}")
        print("  " + line.strip(), flush=True)
        self.base_url = match.group(1)

    def forward_seconds(self) -> float:
        """Seconds the server's batched decodes have taken so far (``/metrics``; 0 without ``--parallel``)."""
        with urllib.request.urlopen(self.base_url.removesuffix("/v1") + "/metrics", timeout=30) as reply:
            found = re.search(r"^specplan_batched_forward_seconds_total (\S+)$", reply.read().decode(), re.MULTILINE)
        return float(found.group(1)) if found else 0.0

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(60)


class PeerServer:
    """llama-server with ``arguments`` after its model, on a free port, ``slots`` parallel sequences."""

    def __init__(self, arguments: list[str], target: Path, threads: int, slots: int, repack: bool):
        def command(port: int) -> list[str]:
            base = [str(server_binary()), "-m", str(target), "-t", str(threads), "-c", str(4096 * slots),
                    "-np", str(slots), "--host", "127.0.0.1", "--port", str(port), "-ngl", "0", "--no-webui"]
            keep = repack or "--no-repack" in arguments  # an exported command says it itself where it must
            return base + ([] if keep else ["--no-repack"]) + arguments

        self.server = LlamaServer(command, "llama-server")
        self.server.start()
        print("  " + shlex.join(command(self.server.port)), flush=True)
        self.base_url = self.server.url + "/v1"

    def stop(self) -> None:
        self.server.stop()


def peer_arguments(name: str, plan: Path, profile) -> list[str]:
    """llama-server's speculative arguments for a server name."""
    if name == "exported":
        out = subprocess.run([str(Path(sys.executable).parent / "specplan"), "export", str(plan), "--engine",
                              "llama.cpp", "--json"], capture_output=True, text=True, check=True).stdout
        words = shlex.split(json.loads(out)["config"].splitlines()[0])
        return words[words.index("-m") + 2:]  # what follows the model path
    peer = parse_peer(name)
    full = server_command("x", peer, "model", 1, 1, draft=drafter_gguf(profile) if peer.needs_draft_model else None)
    return full[full.index("--no-repack") + 1:]


class ChunkTokens:
    """Counts the tokens of a streamed chunk's text with the target's own vocabulary (llama.cpp, vocabulary
    only: no weights load)."""

    llama = None
    vocab = None

    @classmethod
    def open(cls, gguf: Path) -> None:
        from specplan.runtime.llama_cpp_session import _llama_cpp, _prepare_backend

        cls.llama = _llama_cpp()
        _prepare_backend(cls.llama, verbose=False)
        params = cls.llama.llama_model_default_params()
        params.vocab_only = True
        cls.model = cls.llama.llama_model_load_from_file(str(gguf).encode(), params)  # freed when the process ends
        cls.vocab = cls.llama.llama_model_get_vocab(cls.model)

    @classmethod
    def count(cls, text: str) -> int:
        data = text.encode()
        buffer = (cls.llama.llama_token * (len(data) + 8))()
        return max(0, cls.llama.llama_tokenize(cls.vocab, data, len(data), buffer, len(buffer), False, True))


def one_request(base_url: str, prompt, max_tokens: int, prediction: bool) -> dict:
    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=900)
    extra = {}
    if prediction:
        extra["prediction"] = {"type": "content", "content": "```python\n" + CODE.search(prompt.text).group(1) + "\n```"}
    start = time.perf_counter()
    first, first_text = None, ""
    parts, usage = [], None
    for chunk in client.chat.completions.create(model="specplan", messages=[{"role": "user", "content": prompt.text}],
                                                max_tokens=max_tokens, temperature=0, stream=True,
                                                stream_options={"include_usage": True}, **extra):
        if chunk.choices and chunk.choices[0].delta.content:
            if first is None:
                first, first_text = time.perf_counter(), chunk.choices[0].delta.content
            parts.append(chunk.choices[0].delta.content)
        if chunk.usage is not None:
            usage = chunk.usage
    end = time.perf_counter()
    tokens = usage.completion_tokens if usage is not None else 0
    details = getattr(usage, "completion_tokens_details", None)
    first_tokens = min(tokens, max(1, ChunkTokens.count(first_text))) if tokens else 0
    return {"prompt_id": prompt.prompt_id, "text": "".join(parts), "tokens": tokens, "first_tokens": first_tokens,
            "ttft": (first or end) - start, "latency": end - start, "decode_seconds": end - (first or end),
            "accepted_prediction": getattr(details, "accepted_prediction_tokens", None) or 0}


def measure(base_url: str, prompts, max_tokens: int, concurrency: int, prediction: bool,
            started: Callable[[], None] | None = None) -> tuple[list[dict], float]:
    """Every prompt's request, ``concurrency`` at a time, after an uncounted warm-up request; ``started()`` runs
    between the two. The rows and the wall time of the counted requests."""
    one_request(base_url, prompts[0], 8, False)  # warm-up, not counted
    if started is not None:
        started()
    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        rows = list(pool.map(lambda prompt: one_request(base_url, prompt, max_tokens, prediction), prompts))
    return rows, time.perf_counter() - start


def summary(rows: list[dict], wall: float) -> dict:
    after_first = lambda row: max(0, row["tokens"] - row["first_tokens"])  # noqa: E731
    rates = [after_first(row) / row["decode_seconds"] for row in rows if row["decode_seconds"] > 0 and after_first(row)]
    decode_tokens = sum(after_first(row) for row in rows)
    decode_seconds = sum(row["decode_seconds"] for row in rows)
    ttft, latency = [row["ttft"] for row in rows], [row["latency"] for row in rows]
    return {"requests": len(rows), "tokens": sum(row["tokens"] for row in rows),
            "decode_median": float(np.median(rates)) if rates else 0.0,
            "decode_pooled": decode_tokens / decode_seconds if decode_seconds else 0.0,
            "end_to_end": sum(row["tokens"] for row in rows) / sum(row["latency"] for row in rows),
            "first_chunk_tokens": float(np.mean([row["first_tokens"] for row in rows])),
            "ttft_p50": float(np.percentile(ttft, 50)), "ttft_p95": float(np.percentile(ttft, 95)),
            "latency_p50": float(np.percentile(latency, 50)), "latency_p95": float(np.percentile(latency, 95)),
            "aggregate": sum(row["tokens"] for row in rows) / wall, "wall": wall,
            "accepted_prediction": sum(row["accepted_prediction"] for row in rows)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", type=Path, required=True)
    parser.add_argument("--workload", default="humaneval-edit")
    parser.add_argument("--limit", type=int, default=40)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--concurrency", default="1")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--servers", default="serve,llama-server")
    parser.add_argument("--out", type=Path, default=Path("/tmp/serve-http"))
    parser.add_argument("--alt-code", type=Path,
                        help="a second specplan checkout, served as `serve-alt` (two versions compared in one run)")
    parser.add_argument("--rounds", type=int, default=0,
                        help="interleave: start every server at once (frozen while another is measured) and send them the "
                             "prompts in this many chunks, each chunk to every server in turn (0: one server after another)")
    args = parser.parse_args()
    plan, profile, _ = load_plan_and_profile(str(args.plan))
    prompts = workload_split(args.workload, "evaluation")[:args.limit]
    target = Path(profile.target.source) if Path(profile.target.source).is_file() else None
    if target is None:
        from specplan.models.load import gguf_file
        target = Path(gguf_file(profile.target.source))
    repack = engine_repacks(exact=profile.exact)
    ChunkTokens.open(target)
    args.out.mkdir(parents=True, exist_ok=True)
    results = {}
    if args.rounds > 0:
        for concurrency in [int(c) for c in args.concurrency.split(",")]:
            interleaved(args, plan, profile, prompts, target, repack, concurrency, results)
        print_table(results)
        return 0
    for name in args.servers.split(","):
        for concurrency in [int(c) for c in args.concurrency.split(",")]:
            print(f"{name} at concurrency {concurrency}: {len(prompts)} {args.workload} prompts x {args.max_tokens}",
                  flush=True)
            server = start(name, args, plan, profile, target, repack, concurrency)
            try:
                rows, wall = measure(server.base_url, prompts, args.max_tokens, concurrency, name == "serve-prediction")
            finally:
                server.stop()
            results[f"{name}@{concurrency}"] = {"summary": summary(rows, wall), "rows": rows}
            (args.out / "results.json").write_text(json.dumps(results, indent=1))
            print("  " + json.dumps({k: round(v, 3) if isinstance(v, float) else v
                                     for k, v in results[f"{name}@{concurrency}"]["summary"].items()}), flush=True)
    print_table(results)
    return 0


def start(name: str, args, plan, profile, target: Path, repack: bool, concurrency: int):
    if name.startswith("serve"):  # serve-turns: one request at a time whatever the concurrency
        if name == "serve-alt" and args.alt_code is None:
            raise SystemExit("serve-alt serves another checkout: pass --alt-code DIR")
        return SpecplanServer(args.plan, args.threads, 1 if name == "serve-turns" else concurrency,
                              args.alt_code if name == "serve-alt" else None)
    return PeerServer(peer_arguments(name, args.plan, profile), target, args.threads, concurrency, repack)


def pause(server, paused: bool) -> None:
    """Freeze (SIGSTOP) or wake (SIGCONT) a server between its chunks, so that nothing of the others (a
    polling thread, a late cache edit) runs beside the measured one."""
    process = server.process if isinstance(server, SpecplanServer) else server.server.process
    process.send_signal(signal.SIGSTOP if paused else signal.SIGCONT)
    if not paused:
        time.sleep(0.5)


def interleaved(args, plan, profile, prompts, target: Path, repack: bool, concurrency: int, results: dict) -> None:
    """Every server started at once, each frozen but while its chunk runs (:func:`pause`); the prompts in
    ``args.rounds`` chunks, each chunk sent to every server in turn (the order reversed every other chunk),
    so that a slow minute of a shared machine falls on all of them. Per server: the rows of every chunk and the summed wall time; ``chunks``: each chunk's aggregate."""
    names = args.servers.split(",")
    print(f"interleaved at concurrency {concurrency}: {len(prompts)} {args.workload} prompts x {args.max_tokens} "
          f"in {args.rounds} chunks over {', '.join(names)}", flush=True)
    servers = {}
    try:
        for name in names:
            servers[name] = start(name, args, plan, profile, target, repack, concurrency)
            pause(servers[name], True)
        rows = {name: [] for name in names}
        walls = {name: 0.0 for name in names}
        chunks = {name: [] for name in names}
        forwards = {name: 0.0 for name in names}  # a serve --parallel server's seconds in batched decodes
        for index, chunk in enumerate(np.array_split(np.arange(len(prompts)), args.rounds)):
            part = [prompts[i] for i in chunk]
            for name in (names if index % 2 == 0 else names[::-1]):
                pause(servers[name], False)
                served = isinstance(servers[name], SpecplanServer)  # its forward_seconds() stay 0 without --parallel
                before = []  # the decode seconds after the warm-up request
                try:
                    got, wall = measure(servers[name].base_url, part, args.max_tokens, concurrency,
                                        name == "serve-prediction",
                                        (lambda: before.append(servers[name].forward_seconds())) if served else None)
                    forwards[name] += servers[name].forward_seconds() - before[0] if served else 0.0
                finally:
                    pause(servers[name], True)
                rows[name] += got
                walls[name] += wall
                chunks[name].append(sum(row["tokens"] for row in got) / wall)
    finally:
        for server in servers.values():
            pause(server, False)
            server.stop()
    for name in names:
        results[f"{name}@{concurrency}"] = {"summary": summary(rows[name], walls[name]), "rows": rows[name],
                                           "chunks": chunks[name]}
        if forwards[name]:  # the share of the wall time the decodes took; the rest is the host's (Python, HTTP)
            results[f"{name}@{concurrency}"]["summary"]["forward_share"] = forwards[name] / walls[name]
        print(f"  {name}: " + json.dumps({k: round(v, 3) if isinstance(v, float) else v
                                         for k, v in results[f"{name}@{concurrency}"]["summary"].items()}), flush=True)
        print(f"  {name} aggregate per chunk: {', '.join(f'{value:.1f}' for value in chunks[name])}", flush=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1))


def print_table(results: dict) -> None:
    reference = {key.split("@")[1]: value["summary"] for key, value in results.items() if key.startswith("llama-server@")}
    first = {key.split("@")[0]: value["rows"] for key, value in results.items() if key.endswith("@1")}
    print("\n| server | C | decode tok/s (median) | pooled | x llama-server plain | end to end tok/s | x plain "
          "| first chunk, tokens | TTFT p50 / p95 s | latency p50 / p95 s | aggregate tok/s | same text as C=1 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---|")
    for key, value in results.items():
        name, concurrency = key.split("@")
        s = value["summary"]
        plain = reference.get(concurrency)
        ratio = f"{s['decode_pooled'] / plain['decode_pooled']:.2f}x" if plain and plain["decode_pooled"] else "-"
        whole = f"{s['end_to_end'] / plain['end_to_end']:.2f}x" if plain and plain["end_to_end"] else "-"
        same = "-"
        if concurrency != "1" and name in first:
            texts = {row["prompt_id"]: row["text"] for row in first[name]}
            same = f"{sum(texts.get(row['prompt_id']) == row['text'] for row in value['rows'])}/{len(value['rows'])}"
        print(f"| {name} | {concurrency} | {s['decode_median']:.1f} | {s['decode_pooled']:.1f} | {ratio} | "
              f"{s['end_to_end']:.1f} | {whole} | {s['first_chunk_tokens']:.1f} | {s['ttft_p50']:.2f} / {s['ttft_p95']:.2f} | {s['latency_p50']:.2f} / {s['latency_p95']:.2f} | "
              f"{s['aggregate']:.1f} | {same} |")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    raise SystemExit(main())

"""llama.cpp's own server (``llama-server``) as a bench peer, with and without its own speculative
decoding, measured in the same run as a plan on the llama.cpp backend (the same GGUF file, threads
and prompts).

Baseline names (each peer is its own server process, with the settings named):

- ``llama-server``: plain decoding (``--spec-type none``); ``llama-server-no-fa``: the same with flash
  attention off (``-fa off``), the setting a profile may choose for the target (profiler/engine_floor.py);
- ``llama-server-draft``: ``--spec-type draft-simple`` with the profile's ``model:`` drafter GGUF as
  ``--spec-draft-model`` at llama.cpp's defaults; ``llama-server-draft:N``: the same with
  ``--spec-draft-n-max N``;
- ``llama-server-ngram`` (= ``llama-server-ngram-simple``), ``llama-server-ngram-map-k``,
  ``llama-server-ngram-map-k4v``, ``llama-server-ngram-mod``, ``llama-server-ngram-cache``: that
  ``--spec-type`` at its defaults.

The binary is ``$SPECPLAN_LLAMA_SERVER`` or ``$SPECPLAN_CACHE/bin/llama-server``, which
``scripts/build-llama-server.sh`` builds from the llama.cpp that llama-cpp-python 0.3.36 vendors
(the backend's own version). A server starts on 127.0.0.1 at a free port on the peer's first run
(``-c 4096 -np 1``; weight repacking as the plan's target session has it: llama.cpp's default with
fast numerics, ``--no-repack`` with exact numerics and on a CPU with AMX, whose repacking crashes
decodes), its log goes to a file in a
temporary folder, and it stops on :meth:`LlamaServerMethod.close`, at exit, or (Linux) when the
Python process dies. An idle server uses no CPU, so the peers' servers wait beside the other methods.

Each run POSTs ``/completion`` with the prompt's token ids, greedy sampling (temperature 0,
``top_k`` 1, the top-k sampler alone), no prompt cache and ``return_tokens``, and reads the
generated ids and the server's ``timings``. A measurement's seconds are the server's
``prompt_ms + predicted_ms`` (prefill included, as every bench method is timed; HTTP and JSON are
not), its prefill the ``prompt_ms``. The server does not split its time into forwards, so
``forward_seconds`` is the whole time, and ``target_forwards`` is inferred as generated tokens minus
accepted drafts (the prompt's decode yields the first token, and every later target decode commits
its accepted drafts and one token of its own). Each peer's ``settings`` add, over the runs so far
(the bench's warm-up included), decode tok/s from the server's own ``predicted_ms``, drafts made
and accepted, and the wall time of the HTTP calls (the server's start not included).
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import json
import os
import re
import shutil
import signal
import socket
import sys
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from specplan.bench.metrics import Measurement
from specplan.core.errors import SpecplanError
from specplan.runtime.llama_cpp_session import engine_repacks

PREFIX = "llama-server"
BUILD = "bash scripts/build-llama-server.sh"
CONTEXT = 4096
HEALTH_TIMEOUT_S = 180.0  # loading a 1.5B GGUF and a drafter on a busy 2-core machine
REQUEST_TIMEOUT_S = 900.0
# the part after ``llama-server-``: llama-server's --spec-type name
SPEC_TYPES = {
    "draft": "draft-simple",
    "ngram": "ngram-simple",
    "ngram-simple": "ngram-simple",
    "ngram-map-k": "ngram-map-k",
    "ngram-map-k4v": "ngram-map-k4v",
    "ngram-mod": "ngram-mod",
    "ngram-cache": "ngram-cache",
}
NO_FLASH = PREFIX + "-no-fa"  # plain decoding with flash attention off
EXAMPLES = "llama-server, llama-server-no-fa, llama-server-draft, llama-server-draft:N, llama-server-ngram, llama-server-ngram-map-k, " \
           "llama-server-ngram-map-k4v, llama-server-ngram-mod, llama-server-ngram-cache"


@dataclass(frozen=True)
class ServerPeer:
    """One baseline name: ``spec_type`` None for plain decoding; ``draft_n_max`` None for llama.cpp's default."""

    name: str
    spec_type: str | None = None
    draft_n_max: int | None = None
    flash_off: bool = False  # -fa off

    @property
    def needs_draft_model(self) -> bool:
        return self.spec_type == "draft-simple"

    def describe(self) -> str:
        if self.spec_type is None:
            return "plain decoding" + (", flash attention off" if self.flash_off else "")
        if self.needs_draft_model:
            n_max = f"--spec-draft-n-max {self.draft_n_max}" if self.draft_n_max is not None else "defaults"
            return f"draft-simple ({n_max})"
        return f"{self.spec_type} (defaults)"


def is_llama_server_name(name: str) -> bool:
    """Whether a baseline name is one of this module's (``llama-server`` or ``llama-server-...``)."""
    return name == PREFIX or name.startswith(PREFIX + "-")


def parse_peer(name: str) -> ServerPeer:
    """The peer a baseline name stands for; SpecplanError (one line) for a name that is not one.

    >>> parse_peer("llama-server-draft:4")
    ServerPeer(name='llama-server-draft:4', spec_type='draft-simple', draft_n_max=4, flash_off=False)
    >>> parse_peer("llama-server-ngram").spec_type
    'ngram-simple'
    """
    if name == PREFIX:
        return ServerPeer(name)
    if name == NO_FLASH:
        return ServerPeer(name, flash_off=True)
    match = re.fullmatch(re.escape(PREFIX) + r"-([a-z0-9-]+?)(?::(\d+))?", name)
    if match is None or match.group(1) not in SPEC_TYPES:
        raise SpecplanError(f"unknown llama-server baseline {name!r}; choose from {EXAMPLES}")
    spec_type = SPEC_TYPES[match.group(1)]
    n_max = match.group(2)
    if n_max is not None and spec_type != "draft-simple":
        raise SpecplanError(f"{name!r}: only llama-server-draft takes a draft length (llama-server-draft:N)")
    if n_max is not None and int(n_max) < 1:
        raise SpecplanError(f"{name!r}: the draft length N of llama-server-draft:N must be at least 1")
    return ServerPeer(name, spec_type, int(n_max) if n_max is not None else None)


def server_binary() -> Path:
    """Where the bench looks for llama-server: ``$SPECPLAN_LLAMA_SERVER``, else the cache's ``bin/llama-server``."""
    from specplan.models.registry import cache_root

    explicit = os.environ.get("SPECPLAN_LLAMA_SERVER")
    return Path(explicit) if explicit else cache_root() / "bin" / "llama-server"


def server_command(binary: str | Path, peer: ServerPeer, target: str | Path, threads: int, port: int,
                   draft: str | Path | None = None, context: int = CONTEXT, repack: bool = False) -> list[str]:
    """llama-server's command line for ``peer`` on ``target`` (``draft``: the drafter GGUF of ``draft-simple``;
    ``repack``: llama.cpp's weight repacking, its default, else ``--no-repack``)."""
    command = [str(binary), "-m", str(target), "-t", str(threads), "-c", str(context), "-np", "1",
               "--host", "127.0.0.1", "--port", str(port), "-ngl", "0", "--no-webui"]
    if not repack:
        command.append("--no-repack")
    if peer.flash_off:
        command += ["-fa", "off"]
    if peer.spec_type is None:
        return command + ["--spec-type", "none"]
    if peer.needs_draft_model:
        if draft is None:
            raise SpecplanError(f"{peer.name} needs a draft model GGUF (--spec-draft-model)")
        command += ["--spec-draft-model", str(draft), "-ngld", "0"]
        if peer.draft_n_max is not None:
            command += ["--spec-draft-n-max", str(peer.draft_n_max)]
    return command + ["--spec-type", peer.spec_type]


def completion_request(prompt_ids: Sequence[int], max_new_tokens: int) -> dict:
    """The ``/completion`` body: the ids as the prompt, greedy, no prompt cache, the generated ids returned."""
    return {"prompt": [int(token) for token in prompt_ids], "n_predict": int(max_new_tokens), "temperature": 0.0,
            "top_k": 1, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0, "samplers": ["top_k"],
            "cache_prompt": False, "return_tokens": True, "stream": False}


def measurement(response: dict, max_new_tokens: int) -> Measurement:
    """A Measurement from a ``/completion`` response (see the module's docstring for what each field is)."""
    timings = response.get("timings") or {}
    tokens = tuple(int(token) for token in response.get("tokens") or ())[:max_new_tokens]
    prompt_s = float(timings.get("prompt_ms", 0.0)) / 1000.0
    seconds = prompt_s + float(timings.get("predicted_ms", 0.0)) / 1000.0
    accepted = int(timings.get("draft_n_accepted", 0))
    return Measurement(token_ids=tokens, seconds=seconds, target_forwards=max(1, len(tokens) - accepted) if tokens else 0,
                       forward_seconds=seconds, prefill_seconds=prompt_s, prefill_tokens=1 if tokens else 0)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


_LIVE: "set[LlamaServer]" = set()  # strong references: a server whose method was dropped still stops at exit


@atexit.register
def _stop_all() -> None:
    for server in list(_LIVE):
        server.stop()


def _die_with_parent() -> None:
    """In the child before exec (Linux): SIGTERM when the process that started it dies, even by SIGKILL,
    where atexit cannot run."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class LlamaServer:
    """One llama-server process: started by :meth:`start`, asked by :meth:`complete`, ended by :meth:`stop`."""

    def __init__(self, command_for_port, label: str, health_timeout_s: float = HEALTH_TIMEOUT_S):
        self.command_for_port = command_for_port  # port -> command line
        self.label = label
        self.health_timeout_s = health_timeout_s
        self.process: subprocess.Popen | None = None
        self.port = 0
        self.folder: str | None = None
        self.log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _log_tail(self, lines: int = 1) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines() if self.log_path else []
        except OSError:
            text = []
        tail = [line.strip() for line in text if line.strip()][-lines:]
        return " | ".join(tail)

    def start(self) -> None:
        if self.process is not None and self.process.poll() is None:
            return
        self.folder = tempfile.mkdtemp(prefix="specplan-llama-server-")
        self.log_path = Path(self.folder) / "server.log"
        self.port = free_port()
        command = self.command_for_port(self.port)
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True,
                                            preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        _LIVE.add(self)
        deadline = time.monotonic() + self.health_timeout_s
        while True:
            if self.process.poll() is not None:
                code = self.process.returncode
                tail = self._log_tail()
                self.stop(keep_log=True)
                raise SpecplanError(f"{self.label}: llama-server exited with code {code} while loading ({tail}; "
                                    f"log: {self.log_path})")
            if self._healthy():
                return
            if time.monotonic() > deadline:
                self.stop(keep_log=True)
                raise SpecplanError(f"{self.label}: llama-server did not report ok on /health within "
                                    f"{self.health_timeout_s:.0f} s (log: {self.log_path})")
            time.sleep(0.2)

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=5) as reply:
                return reply.status == 200 and json.loads(reply.read() or b"{}").get("status") == "ok"
        except (urllib.error.URLError, OSError, ValueError):
            return False  # not listening yet, or 503 while the model loads

    def complete(self, body: dict, timeout_s: float = REQUEST_TIMEOUT_S) -> dict:
        """POST ``body`` to ``/completion``; SpecplanError (one line) when the server answers an error or dies."""
        self.start()
        request = urllib.request.Request(self.url + "/completion", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as reply:
                return json.loads(reply.read())
        except urllib.error.HTTPError as error:
            detail = error.read().decode(errors="replace")
            try:
                detail = json.loads(detail).get("error", {}).get("message", detail)
            except (ValueError, AttributeError):
                pass
            raise SpecplanError(f"{self.label}: llama-server answered {error.code}: {' '.join(str(detail).split())[:300]}") from None
        except (urllib.error.URLError, OSError) as error:
            died = self.process is not None and self.process.poll() is not None
            why = f"exited with code {self.process.returncode} ({self._log_tail()})" if died else f"did not answer ({error})"
            raise SpecplanError(f"{self.label}: llama-server {why}; log: {self.log_path}") from None

    def stop(self, keep_log: bool = False) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        _LIVE.discard(self)
        if not keep_log and self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None


class LlamaServerMethod:
    """A llama-server peer as a bench method (kind ``engine``: llama.cpp's own loop and kernels)."""

    kind = "engine"

    def __init__(self, peer: ServerPeer, binary: Path, target: Path, threads: int, draft: Path | None = None,
                 context: int = CONTEXT, repack: bool = False):
        self.peer = peer
        self.name = peer.name
        self.command = functools.partial(server_command, binary, peer, target, threads, draft=draft, context=context,
                                         repack=repack)
        self.server = LlamaServer(self.command, peer.name)
        where = f"{Path(target).name} on the CPU, {threads} threads, -c {context} -np 1" + ("" if repack else ", --no-repack")
        drafter = f", drafter {Path(draft).name}" if draft is not None else ""
        self.description = f"llama-server {peer.describe()}{drafter}, {where}; seconds are the server's prompt_ms + predicted_ms"
        self._settings = {"spec_type": peer.spec_type or "none", "threads": threads, "n_ctx": context}
        if peer.draft_n_max is not None:
            self._settings["spec_draft_n_max"] = peer.draft_n_max
        if draft is not None:
            self._settings["spec_draft_model"] = Path(draft).name
        self.calls = 0
        self.tokens = 0
        self.predicted_ms = 0.0
        self.server_ms = 0.0
        self.wall_s = 0.0
        self.draft_n = 0
        self.draft_n_accepted = 0

    @property
    def settings(self) -> dict:
        """The server's settings, and what it measured over the runs so far (the bench's warm-up included)."""
        measured = dict(self._settings)
        if self.calls:
            measured.update({
                "calls": self.calls,
                # the server's own n_gen_tps: the first token of each call comes from its prompt batch
                "decode_tokens_per_s": round(1000.0 * (self.tokens - self.calls) / self.predicted_ms, 2) if self.predicted_ms else None,
                "server_seconds": round(self.server_ms / 1000.0, 3), "wall_seconds": round(self.wall_s, 3)})
            if self.peer.spec_type is not None:
                measured.update({"draft_n": self.draft_n, "draft_n_accepted": self.draft_n_accepted})
        return measured

    def run(self, prompt_ids: list[int], max_new_tokens: int) -> Measurement:
        self.server.start()  # the first run starts it, before the timer
        start = time.perf_counter()
        response = self.server.complete(completion_request(prompt_ids, max_new_tokens))
        wall = time.perf_counter() - start
        if "tokens" not in response:
            raise SpecplanError(f"{self.name}: llama-server's response has no `tokens` (return_tokens); "
                                f"rebuild it with {BUILD}")
        result = measurement(response, max_new_tokens)
        timings = response.get("timings") or {}
        self.calls += 1
        self.tokens += int(timings.get("predicted_n", result.new_tokens))
        self.predicted_ms += float(timings.get("predicted_ms", 0.0))
        self.server_ms += 1000.0 * result.seconds
        self.wall_s += wall
        self.draft_n += int(timings.get("draft_n", 0))
        self.draft_n_accepted += int(timings.get("draft_n_accepted", 0))
        return result

    def close(self) -> None:
        self.server.stop()


def drafter_gguf(profile, stages=()) -> Path | None:
    """The GGUF of the profile's ``model:`` drafter (the one the plan's ``stages`` use, if any; else the
    first); None when the profile has none, or it is not a GGUF file that is here."""
    from specplan.models.load import gguf_file

    drafters = [m for m in profile.models if m.role == "drafter" and m.source.startswith("model:")]
    used = {stage.drafter for stage in stages}
    drafters.sort(key=lambda m: m.id not in used)
    for model in drafters:
        try:
            path = gguf_file(model.source.removeprefix("model:"))
        except SpecplanError:
            continue
        if path is not None:
            return path
    return None


def llama_server_peers(names: Sequence[str], runner, threads: int, draft_gguf: Path | None,
                       notes: list[str]) -> list[LlamaServerMethod]:
    """The llama-server peers among ``names`` on ``runner``'s target GGUF (``runner.target.path``).

    ``draft_gguf``: the drafter of ``llama-server-draft*`` (:func:`drafter_gguf`). No binary, or a
    draft peer without a drafter, leaves peers out with a line in ``notes``; servers start on the
    first run."""
    peers = [parse_peer(name) for name in names if is_llama_server_name(name)]
    if not peers:
        return []
    binary = server_binary()
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        notes.append(f"{', '.join(p.name for p in peers)} left out: no llama-server at {binary}; build it with "
                     f"{BUILD} (a few minutes, once) or set SPECPLAN_LLAMA_SERVER")
        return []
    target = Path(runner.target.path)
    repack = engine_repacks(runner.target.exact)  # as the plan's target session loads its weights, where llama-server can
    methods = []
    for peer in peers:
        if peer.needs_draft_model and draft_gguf is None:
            notes.append(f"{peer.name} left out: draft-simple needs a drafter GGUF and the plan's profile has no "
                         "model: drafter with a GGUF file (profile one with --drafter model:MODEL)")
            continue
        methods.append(LlamaServerMethod(peer, binary, target, threads, draft_gguf if peer.needs_draft_model else None,
                                         repack=repack))
    return methods

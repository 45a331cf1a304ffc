"""``specplan serve --parallel 2`` on the default GGUF (fast numerics): requests decoded together get
the answers they get one at a time, a client that leaves mid-stream frees its slot while the other
request goes on, more requests than slots wait their turn, and a plan that cannot be batched is
refused in one line."""

from __future__ import annotations

import http.client
import subprocess
import sys
import threading
from urllib.parse import urlsplit

import pytest

from specplan.runtime.lossless import NEAR_TIE
from tests.serve.conftest import STORED, Served, wait_until
from tests.serve.test_faults import chat, idle, metric, send

openai = pytest.importorskip("openai")

PROMPTS = ("Write a Python function that returns the largest of three numbers.",
           "List three colours of the rainbow, one per line.",
           "Name the planets of the solar system in order.")
TOKENS = 32


@pytest.fixture(scope="module")
def fast_plan(tmp_path_factory):
    """The stored default-model llama.cpp profile (fast numerics), solved for one stage."""
    pytest.importorskip("llama_cpp")
    from specplan.api import solve_plan_file
    from specplan.core.plan import save_plan
    from specplan.core.profile import load_profile
    from specplan.planner.options import runtime_options

    folder = tmp_path_factory.mktemp("parallel-plan")
    plan_path = folder / "plan.yaml"
    solution = solve_plan_file(load_profile(STORED), STORED, plan_path, runtime_options(), stages=1)
    save_plan(solution.plan, plan_path)
    return plan_path


@pytest.fixture(scope="module")
def parallel_server(fast_plan):
    served = Served(fast_plan, "--parallel", "2", "--queue", "4")
    yield served
    served.stop()


def answer(client, prompt: str) -> str:
    reply = client.chat.completions.create(model="specplan", messages=[{"role": "user", "content": prompt}],
                                           max_tokens=TOKENS, temperature=0)
    return reply.choices[0].message.content


def test_requests_decoded_together_answer_as_one_at_a_time(parallel_server, fast_plan):
    assert "2 requests decode together" in parallel_server.line
    assert "by load: 1 at once: " in parallel_server.line and "; 2 at once: " in parallel_server.line
    client = openai.OpenAI(base_url=parallel_server.base_url, api_key="unused", max_retries=0, timeout=300)
    alone = {prompt: answer(client, prompt) for prompt in PROMPTS}
    steps, seconds = (metric(parallel_server.root, name) for name in
                      ("specplan_batched_forwards_total", "specplan_batched_forward_seconds_total"))
    assert steps > 0 and seconds > 0  # every decode of a --parallel server is a batcher's step
    requests = PROMPTS * 2  # 6 requests, 2 slots
    together: dict[int, str] = {}
    errors: list[Exception] = []

    def one(index: int, prompt: str) -> None:
        try:
            together[index] = answer(client, prompt)
        except Exception as error:  # a request that failed fails the test below, not a thread's warning
            errors.append(error)

    threads = [threading.Thread(target=one, args=(index, prompt)) for index, prompt in enumerate(requests)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    gaps = {index: near_tie_gap(fast_plan, prompt, alone[prompt], together[index])
            for index, prompt in enumerate(requests) if together[index] != alone[prompt]}
    assert all(gap < NEAR_TIE for gap in gaps.values()), gaps  # fast numerics: batched rows round differently
    assert wait_until(lambda: idle(parallel_server.root))


def near_tie_gap(plan, prompt: str, reference: str, other: str) -> float:
    """The target's top-2 logit gap where ``other`` first parts from ``reference`` (their token ids),
    after a fresh prefill of the prompt and the shared part."""
    from specplan.api import Runner
    from specplan.models.chat import encode_messages
    from specplan.runtime.lossless import divergence_gap, first_divergence

    runner = Runner.open(plan, threads=2).plan_runner
    tokenizer = runner.target.tokenizer
    prompt_ids = encode_messages(tokenizer, [{"role": "user", "content": prompt}])
    reference_ids, other_ids = (tokenizer(text, add_special_tokens=False)["input_ids"] for text in (reference, other))
    return divergence_gap(runner.reference_model, prompt_ids, reference_ids, first_divergence(reference_ids, other_ids))


def test_a_client_that_leaves_frees_its_slot_while_the_other_goes_on(parallel_server):
    before = metric(parallel_server.root, "specplan_completion_tokens_total")  # the module's server served earlier tests
    where = urlsplit(parallel_server.root)
    connection = http.client.HTTPConnection(where.hostname, where.port, timeout=60)
    body = chat(stream=True, max_tokens=2000, messages=[{"role": "user", "content": "Write a very long story."}])
    connection.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
    outcome = {}
    other = threading.Thread(target=lambda: outcome.update(reply=send(parallel_server.root, "POST",
                                                                        "/v1/chat/completions", chat(max_tokens=24))))
    other.start()
    response = connection.getresponse()
    assert response.status == 200 and response.readline().startswith(b"data:")
    connection.sock.close()  # leave without reading the rest
    connection.close()
    other.join()
    status, _, body = outcome["reply"]
    assert status == 200 and body["usage"]["completion_tokens"] > 0
    assert wait_until(lambda: idle(parallel_server.root), 30)
    assert metric(parallel_server.root, "specplan_completion_tokens_total") - before < 2000


def test_an_exact_numerics_plan_is_refused_in_one_line(exact_plan):
    command = [sys.executable, "-m", "specplan.cli.main", "serve", str(exact_plan), "--port", "0", "--parallel", "2"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "fast numerics" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_tree_with_more_paths_than_a_slot_holds_is_refused_at_start(fast_plan):
    """Each of N slots holds 256 // N sequence ids (one for the committed tokens, one per tree path):
    a 40-leaf tree fits 6 slots, not 8, and the refusal names the largest --parallel that fits."""
    from dataclasses import replace

    from specplan.api import shared_sessions
    from specplan.core.errors import SpecplanError
    from specplan.core.plan import StageShape, load_plan
    from specplan.core.profile import load_profile

    plan, profile = load_plan(fast_plan), load_profile(STORED)
    star = StageShape(kind="tree", parents=(-1,) + (0,) * 40)
    assert star.most_paths == 40 and StageShape(kind="sequence", gamma=7).most_paths == 1
    wide = replace(plan, stages=(replace(plan.stages[0], shape=star),))
    with pytest.raises(SpecplanError, match=r"40: pass --parallel 6 or fewer"):
        shared_sessions(wide, profile, 8, threads=1)
    assert shared_sessions(wide, profile, 6, threads=1).slots == 6


def test_a_server_schedules_by_load_from_the_plan_or_its_profile(fast_plan):
    """No schedule for one request at a time; every load up to N (up to 8; beyond, 2, 4, ... and N) solved
    from the profile when the plan has none; the plan's own schedule where it has one."""
    from dataclasses import replace

    from specplan.runtime.load_schedule import serving_schedule
    from specplan.core.contract import load_plan_and_profile

    plan, profile, _ = load_plan_and_profile(str(fast_plan))
    assert serving_schedule(plan, profile, 1) is None
    assert [row.batch for row in serving_schedule(plan, profile, 3).rows] == [1, 2, 3]
    schedule = serving_schedule(plan, profile, 4)
    assert [row.batch for row in schedule.rows] == [1, 2, 3, 4]
    assert serving_schedule(replace(plan, schedule=schedule), profile, 8) is schedule
    assert [row.batch for row in serving_schedule(plan, profile, 12).rows] == [1, 2, 4, 8, 12]
    widest = max(max(curve.n) for curve in profile.target.latency)
    beyond = [row.batch for row in serving_schedule(plan, profile, 2 * widest).rows]
    assert max(beyond) <= widest and beyond[0] == 1  # loads beyond the curve play the last row it reaches


def test_a_torch_plan_serves_requests_together(tmp_path, tiny_model_dir):
    """On the torch backend (a tiny random model in float32, an n-gram plan) two requests at once are
    decoded together, each on a row of one batched cache, and answer exactly as one at a time."""
    from specplan.cli.main import main

    assert main(["profile", "--target", tiny_model_dir, "--drafter", "ngram:3", "--quick", "--limit", "2", "--dtype",
                 "float32", "--device", "cpu", "-o", str(tmp_path / "profile.yaml")]) == 0
    served = Served(tmp_path / "plan.yaml", "--parallel", "2")
    try:
        assert "2 requests decode together" in served.line
        client = openai.OpenAI(base_url=served.base_url, api_key="unused", max_retries=0, timeout=300)
        alone = [answer(client, prompt) for prompt in PROMPTS[:2]]
        together: dict[int, str] = {}
        threads = [threading.Thread(target=lambda i=i: together.update({i: answer(client, PROMPTS[i])})) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert [together.get(0), together.get(1)] == alone
        assert metric(served.root, "specplan_rounds_total") > 0
        assert wait_until(lambda: idle(served.root))
    finally:
        served.stop()

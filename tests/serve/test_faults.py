"""A server that survives its clients: every malformed or out-of-range request gets its status and an
OpenAI error body (never a 500 or a traceback); a client that leaves mid-stream frees the decoder
within a round; a full queue answers 429 with Retry-After; SIGTERM finishes the request in flight;
afterwards the server still answers and its metrics show nothing left active or queued."""

from __future__ import annotations

import http.client
import json
import re
import threading
import time
from urllib.parse import urlsplit

import pytest

from tests.serve.conftest import Served, wait_until

CHAT = {"model": "specplan", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 4}


def send(root: str, method: str, path: str, body: bytes | None = None, timeout: float = 60.0):
    """(status, headers, parsed JSON body or text) of one raw HTTP request."""
    where = urlsplit(root)
    connection = http.client.HTTPConnection(where.hostname, where.port, timeout=timeout)
    connection.request(method, path, body=body, headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    data = response.read().decode()
    connection.close()
    try:
        return response.status, {k.lower(): v for k, v in response.getheaders()}, json.loads(data)
    except json.JSONDecodeError:
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data


def chat(**changes) -> bytes:
    return json.dumps({**CHAT, **changes}).encode()


FAULTS = [  # (what, path, body, status, a fragment of the message)
    ("malformed JSON", "/v1/chat/completions", b'{"model": "specplan", "messages": [', 400, "not valid JSON"),
    ("a list for a body", "/v1/chat/completions", b"[]", 400, "JSON object"),
    ("no messages", "/v1/chat/completions", json.dumps({"model": "specplan"}).encode(), 400, "messages"),
    ("empty messages", "/v1/chat/completions", chat(messages=[]), 400, "messages"),
    ("only empty text", "/v1/chat/completions", chat(messages=[{"role": "user", "content": " "}]), 400, "empty"),
    ("an unknown role", "/v1/chat/completions", chat(messages=[{"role": "robot", "content": "hi"}]), 400, "role"),
    ("a string for a number", "/v1/chat/completions", chat(temperature="hot"), 400, "temperature"),
    ("a string for a count", "/v1/chat/completions", chat(max_tokens="12"), 400, "max_tokens"),
    ("a negative max_tokens", "/v1/chat/completions", chat(max_tokens=-3), 400, "max_tokens"),
    ("a huge max_tokens", "/v1/chat/completions", chat(max_tokens=10**9), 400, "context"),
    ("temperature 3", "/v1/chat/completions", chat(temperature=3), 400, "temperature"),
    ("top_p 0", "/v1/chat/completions", chat(top_p=0), 400, "top_p"),
    ("n = 2", "/v1/chat/completions", chat(n=2), 400, "n"),
    ("logprobs", "/v1/chat/completions", chat(logprobs=True), 400, "logprobs"),
    ("tools", "/v1/chat/completions", chat(tools=[{"type": "function"}]), 400, "tools"),
    ("five stop strings", "/v1/chat/completions", chat(stop=["a", "b", "c", "d", "e"]), 400, "stop"),
    ("a prediction of another type", "/v1/chat/completions",
     chat(prediction={"type": "image", "content": "x"}), 400, "prediction"),
    ("an unknown model", "/v1/chat/completions", chat(model="gpt-9"), 404, "does not exist"),
    ("a prompt beyond the context", "/v1/chat/completions",
     chat(messages=[{"role": "user", "content": "word " * 5000}]), 400, "context"),
    ("two prompts at once", "/v1/completions",
     json.dumps({"model": "specplan", "prompt": ["a", "b"]}).encode(), 400, "one non-empty prompt"),
    ("an unknown path", "/v1/embeddings", b"{}", 404, "no route"),
    ("GET on a POST route", "/v1/chat/completions", None, 405, "no route"),
    ("a 9 MiB body", "/v1/chat/completions", b" " * (9 * 1024 * 1024), 413, "MiB"),
]


@pytest.mark.parametrize("what, path, body, status, fragment", FAULTS, ids=[fault[0] for fault in FAULTS])
def test_a_fault_gets_its_status_and_an_openai_error_body(server, what, path, body, status, fragment):
    method = "GET" if body is None else "POST"
    code, _, answer = send(server.root, method, path, body)
    assert code == status, answer
    assert isinstance(answer, dict) and set(answer["error"]) == {"message", "type", "param", "code"}
    assert fragment in answer["error"]["message"] and "Traceback" not in answer["error"]["message"]


def metric(root: str, name: str) -> float:
    _, _, text = send(root, "GET", "/metrics")
    match = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    return float(match.group(1))


def idle(root: str) -> bool:
    return metric(root, "specplan_active_requests") == 0 and metric(root, "specplan_queued_requests") == 0


def test_a_client_that_leaves_mid_stream_frees_the_decoder(server):
    where = urlsplit(server.root)
    connection = http.client.HTTPConnection(where.hostname, where.port, timeout=60)
    before = metric(server.root, "specplan_completion_tokens_total")
    body = chat(stream=True, max_tokens=2000, messages=[{"role": "user", "content": "Write a very long story."}])
    connection.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    assert response.status == 200 and response.readline().startswith(b"data:")
    connection.sock.close()  # leave without reading the rest
    connection.close()
    assert wait_until(lambda: idle(server.root), 30)
    assert metric(server.root, "specplan_completion_tokens_total") - before < 2000  # it stopped early
    assert send(server.root, "POST", "/v1/chat/completions", chat())[0] == 200  # and still answers


def test_beyond_the_queue_requests_get_429_with_retry_after(server):
    results = []

    def one():
        results.append(send(server.root, "POST", "/v1/chat/completions", chat(max_tokens=24)))

    threads = [threading.Thread(target=one) for _ in range(12)]  # the fixture's queue holds 3
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    statuses = sorted(status for status, _, _ in results)
    assert statuses.count(200) >= 3 and statuses.count(429) >= 1 and set(statuses) <= {200, 429}
    refused = next(result for result in results if result[0] == 429)
    assert int(refused[1]["retry-after"]) >= 1 and refused[2]["error"]["type"] == "rate_limit_error"
    assert wait_until(lambda: idle(server.root))
    assert send(server.root, "GET", "/health")[2]["status"] == "ok"


def test_sigterm_finishes_the_request_in_flight(exact_plan):
    served = Served(exact_plan)
    outcome = {}

    def long_request():
        outcome["answer"] = send(served.root, "POST", "/v1/chat/completions",
                                 chat(max_tokens=96, messages=[{"role": "user", "content": "Tell a story."}]))

    thread = threading.Thread(target=long_request)
    thread.start()
    assert wait_until(lambda: metric(served.root, "specplan_active_requests") == 1)
    time.sleep(0.1)
    code, stderr = served.stop()
    thread.join()
    status, _, answer = outcome["answer"]
    assert status == 200 and answer["usage"]["completion_tokens"] > 0, answer
    assert code == 0 and "Traceback" not in stderr

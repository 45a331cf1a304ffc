"""``specplan serve`` on the default GGUF, driven by the official ``openai`` client: greedy answers equal
the target's own plain decoding (exact numerics), streamed or not, with or without a prediction, one
request or two at once; a prediction equal to the answer is accepted, a wrong one is rejected and
changes nothing."""

from __future__ import annotations

import threading

import pytest

from specplan.api import Runner
from specplan.models.chat import encode_messages
from specplan.runtime.drafters.base import SamplingConfig

openai = pytest.importorskip("openai")

PROMPTS = ("Write a Python function that returns the largest of three numbers.",
           "List three colours of the rainbow, one per line.")
TOKENS = 40


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def plain_answers(exact_plan):
    """The target's own greedy decoding of each prompt, in this process (llama.cpp, exact numerics)."""
    runner = Runner.open(exact_plan, threads=2).plan_runner
    answers = {}
    for prompt in PROMPTS:
        ids = encode_messages(runner.target.tokenizer, [{"role": "user", "content": prompt}])
        result = runner.generate(ids, TOKENS, SamplingConfig(), plain=True)
        answers[prompt] = (runner.target.tokenizer.decode(result.token_ids, skip_special_tokens=True),
                           len(result.token_ids))
    return answers


def ask(client, prompt: str, **extra):
    return client.chat.completions.create(model="specplan", messages=[{"role": "user", "content": prompt}],
                                          max_tokens=TOKENS, temperature=0, **extra)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_a_greedy_answer_is_the_targets_own(client, plain_answers, prompt):
    answer = ask(client, prompt)
    text, tokens = plain_answers[prompt]
    assert answer.choices[0].message.content == text
    assert answer.usage.completion_tokens == tokens
    assert answer.choices[0].finish_reason == ("length" if tokens == TOKENS else "stop")


def test_a_repeated_prompt_is_answered_from_the_cache_the_same(client, plain_answers):
    prompt = PROMPTS[1]
    answers = [ask(client, prompt) for _ in range(2)]
    assert [answer.choices[0].message.content for answer in answers] == [plain_answers[prompt][0]] * 2
    assert answers[1].usage.prompt_tokens_details.cached_tokens == answers[1].usage.prompt_tokens - 1


def test_a_stream_sends_the_same_text_then_the_usage(client, plain_answers):
    prompt = PROMPTS[0]
    chunks = list(ask(client, prompt, stream=True, stream_options={"include_usage": True}))
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text == plain_answers[prompt][0]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices][-1] in ("length", "stop")
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == plain_answers[prompt][1]


def test_a_prediction_that_is_the_answer_is_accepted(client, plain_answers):
    prompt = PROMPTS[0]
    text, tokens = plain_answers[prompt]
    answer = ask(client, prompt, prediction={"type": "content", "content": text})
    details = answer.usage.completion_tokens_details
    assert answer.choices[0].message.content == text
    assert details.accepted_prediction_tokens >= tokens // 2  # most of it was drafted from the prediction
    assert details.rejected_prediction_tokens <= 2  # a token may re-split where the answer ends


def test_a_wrong_prediction_changes_nothing(client, plain_answers):
    prompt = PROMPTS[1]
    text = plain_answers[prompt][0]
    middle = len(text) // 3
    wrong = [{"type": "text", "text": text[:middle]}, {"type": "text", "text": " mauve, taupe and chartreuse " + text[middle:]}]
    answer = ask(client, prompt, prediction={"type": "content", "content": wrong})
    assert answer.choices[0].message.content == plain_answers[prompt][0]
    assert answer.usage.completion_tokens_details.rejected_prediction_tokens > 0


def test_two_requests_at_once_get_their_own_answers(client, plain_answers):
    answers = {}

    def one(prompt):
        answers[prompt] = ask(client, prompt, stream=prompt == PROMPTS[1])

    threads = [threading.Thread(target=one, args=(prompt,)) for prompt in PROMPTS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers[PROMPTS[0]].choices[0].message.content == plain_answers[PROMPTS[0]][0]
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in answers[PROMPTS[1]] if chunk.choices)
    assert streamed == plain_answers[PROMPTS[1]][0]


def test_stop_strings_end_the_answer_before_them(client, plain_answers):
    prompt = PROMPTS[1]
    text = plain_answers[prompt][0]
    stop = text.strip()[len(text.strip()) // 2:][:3]  # three characters from the middle of the answer
    answer = ask(client, prompt, stop=[stop])
    assert answer.choices[0].message.content == text[:text.index(stop)]
    assert answer.choices[0].finish_reason == "stop"


def test_text_completions_and_the_model_list(client):
    completion = client.completions.create(model="specplan", prompt="The capital of France is", max_tokens=8,
                                           temperature=0)
    assert completion.object == "text_completion" and completion.usage.completion_tokens <= 8
    assert completion.choices[0].text
    assert [model.id for model in client.models.list()] == ["specplan"]

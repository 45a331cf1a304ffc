"""The OpenAI request bodies ``specplan serve`` accepts, checked by pydantic, and OpenAI's error body.

Fields follow OpenAI's API reference (Chat Completions, Completions, Predicted Outputs); fields a
client may send that change nothing here (``user``, ``metadata``, ``frequency_penalty`` of 0, ...)
are ignored, and those that would change the output in a way the server does not implement
(``n`` > 1, ``logprobs``, ``tools``) are refused in one line, never silently dropped.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

MAX_STOP_STRINGS = 4  # as OpenAI's API


class ServeError(Exception):
    """A request the server answers with an OpenAI-style error body and ``status``."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error", headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["text"]
    text: str


def joined(content: str | list[TextPart] | None) -> str:
    """A message's or a prediction's text: the string, or its text parts joined."""
    if content is None:
        return ""
    return content if isinstance(content, str) else "".join(part.text for part in content)


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart] | None = None


class Prediction(BaseModel):
    """OpenAI's Predicted Outputs: text the client expects the answer to repeat (a file to edit)."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["content"]
    content: str | list[TextPart]


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class Common(BaseModel):
    """The fields both endpoints share."""

    model_config = ConfigDict(extra="ignore")
    model: str = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0, allow_inf_nan=False)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0, allow_inf_nan=False)
    seed: int | None = Field(default=None, ge=0, lt=2**63)
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(default=1, ge=1, le=1)
    logprobs: bool | int | None = None
    prediction: Prediction | None = None

    @field_validator("stop")
    @classmethod
    def _stops(cls, stop):
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        if len(stops) > MAX_STOP_STRINGS or any(not text for text in stops):
            raise ValueError(f"give at most {MAX_STOP_STRINGS} non-empty stop strings")
        return stops

    @field_validator("logprobs")
    @classmethod
    def _no_logprobs(cls, logprobs):
        if logprobs:
            raise ValueError("logprobs are not returned by this server; leave them out")
        return logprobs

    def stops(self) -> tuple[str, ...]:
        return tuple(self.stop or ())

    def prediction_text(self) -> str:
        return joined(self.prediction.content) if self.prediction is not None else ""


class ChatRequest(Common):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    tools: list | None = None

    @field_validator("tools")
    @classmethod
    def _no_tools(cls, tools):
        if tools:
            raise ValueError("tool calls are not supported by this server; leave `tools` out")
        return tools

    def budget(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


class CompletionRequest(Common):
    prompt: str | list[str]
    echo: bool = False

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, prompt):
        prompts = [prompt] if isinstance(prompt, str) else prompt
        if len(prompts) != 1 or not prompts[0].strip():
            raise ValueError("give one non-empty prompt string")
        return prompts[0]

    @field_validator("echo")
    @classmethod
    def _no_echo(cls, echo):
        if echo:
            raise ValueError("echo is not supported by this server; leave it out")
        return echo

    def budget(self) -> int | None:
        return self.max_tokens


def parse(model: type[BaseModel], body: bytes) -> BaseModel:
    """The JSON ``body`` checked strictly against ``model`` (no string for a number, no number for a
    flag); ServeError 400 naming the first bad field otherwise."""
    try:
        return model.model_validate_json(body, strict=True)
    except ValidationError as error:
        first = error.errors()[0]
        if first["type"] == "json_invalid":
            raise ServeError(400, f"the request body is not valid JSON ({first['msg'].removeprefix('Invalid JSON: ')})") from None
        if first["type"] == "model_type":
            raise ServeError(400, "the request body must be a JSON object") from None
        where = ".".join(str(part) for part in first["loc"])
        message = first["msg"].removeprefix("Value error, ")
        raise ServeError(400, f"{where}: {message}" if where else message, param=where or None) from None

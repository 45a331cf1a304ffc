"""The ASGI application (Starlette): OpenAI's ``/v1/chat/completions``, ``/v1/completions`` and
``/v1/models``, with ``/health`` and ``/metrics``. Every error is an OpenAI error body with its
status (400 bad input, 404 unknown model or path, 413 a body too large, 429 the queue full, 500 a
bug), never a traceback; streams are server-sent events (sse-starlette) ending in ``[DONE]``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable

from prometheus_client import CONTENT_TYPE_LATEST
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from specplan.serve.schema import ChatRequest, CompletionRequest, ServeError, parse
from specplan.serve.service import Service
from specplan.serve.worker import Delta, Failed, Finished, Job

MAX_BODY_BYTES = 8 * 1024 * 1024  # a request body beyond this is refused (413) before it is parsed
DISCONNECT_POLL = 0.25  # seconds between checks that a non-streaming client is still there


def error_response(error: ServeError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


async def read_body(request: Request) -> bytes:
    size = request.headers.get("content-length")
    if size is not None and size.isdigit() and int(size) > MAX_BODY_BYTES:
        raise ServeError(413, f"the request body is over {MAX_BODY_BYTES // (1024 * 1024)} MiB; send a shorter prompt")
    body = bytearray()
    async for part in request.stream():
        body.extend(part)
        if len(body) > MAX_BODY_BYTES:
            raise ServeError(413, f"the request body is over {MAX_BODY_BYTES // (1024 * 1024)} MiB; send a shorter prompt")
    return bytes(body)


def build_app(service: Service) -> Starlette:
    def endpoint(name: str, handler: Callable[[Request], Awaitable[Response]]):
        async def answer(request: Request) -> Response:
            try:
                response = await handler(request)
            except ServeError as error:
                response = error_response(error)
            except Exception as error:  # a bug: an OpenAI body, not a traceback
                response = error_response(ServeError(500, f"internal error: {type(error).__name__}: {error}",
                                                     kind="server_error"))
            service.metrics.requests.labels(name, str(response.status_code)).inc()
            return response
        return answer

    async def chat(request: Request) -> Response:
        body = parse(ChatRequest, await read_body(request))
        service.check_model(body.model)
        ids = await asyncio.to_thread(service.chat_ids, body)
        return await complete(request, body, ids, "chat.completion")

    async def completions(request: Request) -> Response:
        body = parse(CompletionRequest, await read_body(request))
        service.check_model(body.model)
        ids = await asyncio.to_thread(service.completion_ids, body)
        return await complete(request, body, ids, "text_completion")

    async def complete(request: Request, body, ids: list[int], kind: str) -> Response:
        job = service.job(body, ids, body.budget(), asyncio.get_running_loop())
        service.submit(job)
        if body.stream:
            include_usage = body.stream_options is not None and body.stream_options.include_usage
            return EventSourceResponse(stream(job, kind, include_usage), ping=0, sep="\n",
                                       headers={"Cache-Control": "no-cache"})
        return await whole(request, job, kind)

    async def whole(request: Request, job: Job, kind: str) -> Response:
        parts: list[str] = []
        try:
            while True:
                try:
                    event = await asyncio.wait_for(job.events.get(), DISCONNECT_POLL)
                except TimeoutError:
                    if await request.is_disconnected():
                        job.cancelled.set()
                        return Response(status_code=499)
                    continue
                if isinstance(event, Delta):
                    parts.append(event.text)
                elif isinstance(event, Failed):
                    raise ServeError(500, f"internal error: {event.message}", kind="server_error")
                else:
                    return JSONResponse(final_body(job, kind, "".join(parts), event))
        finally:
            job.cancelled.set()  # a no-op once finished; frees the decoder when the handler is cancelled

    def final_body(job: Job, kind: str, text: str, finished: Finished) -> dict:
        choice = {"index": 0, "finish_reason": finished.reason, "logprobs": None}
        if kind == "chat.completion":
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        return {**service.envelope(kind), "choices": [choice], "usage": service.usage(finished)}

    async def stream(job: Job, kind: str, include_usage: bool) -> AsyncIterator[str]:
        chunk_kind = "chat.completion.chunk" if kind == "chat.completion" else kind
        envelope = service.envelope(chunk_kind)

        def chunk(text: str | None, reason: str | None, first: bool = False) -> str:
            if kind == "chat.completion":
                delta = {"role": "assistant", "content": ""} if first else ({} if text is None else {"content": text})
                choice = {"index": 0, "delta": delta, "finish_reason": reason, "logprobs": None}
            else:
                choice = {"index": 0, "text": text or "", "finish_reason": reason, "logprobs": None}
            return json.dumps({**envelope, "choices": [choice]}, ensure_ascii=False)

        try:
            if kind == "chat.completion":
                yield chunk(None, None, first=True)
            while True:
                event = await job.events.get()
                if isinstance(event, Delta):
                    yield chunk(event.text, None)
                elif isinstance(event, Failed):
                    yield json.dumps(ServeError(500, f"internal error: {event.message}", kind="server_error").body())
                    break
                else:
                    yield chunk(None, event.reason)
                    if include_usage:
                        yield json.dumps({**envelope, "choices": [], "usage": service.usage(event)})
                    break
            yield "[DONE]"
        finally:
            job.cancelled.set()  # the client left mid-stream: the decoder stops after this round

    async def models(request: Request) -> Response:
        return JSONResponse(service.models())

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "active": service.worker.active,
                             "queued": service.worker.jobs.qsize()})

    async def metrics(request: Request) -> Response:
        return Response(service.metrics.text(), media_type=CONTENT_TYPE_LATEST)

    async def not_found(request: Request, error: HTTPException) -> Response:
        status = error.status_code
        message = f"no route {request.method} {request.url.path}" if status in (404, 405) else str(error.detail)
        return error_response(ServeError(status, message))

    routes = [Route("/v1/chat/completions", endpoint("chat", chat), methods=["POST"]),
              Route("/v1/completions", endpoint("completions", completions), methods=["POST"]),
              Route("/v1/models", endpoint("models", models), methods=["GET"]),
              Route("/health", endpoint("health", health), methods=["GET"]),
              Route("/metrics", endpoint("metrics", metrics), methods=["GET"])]
    return Starlette(routes=routes, exception_handlers={HTTPException: not_found})

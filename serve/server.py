"""Start ``specplan serve``: open the plan, bind the address (a one-line error when it is taken),
say in one line what is served and how fast the plan predicts, then serve until SIGINT or SIGTERM,
which stop accepting connections and finish the requests in flight before exiting (code 0)."""

from __future__ import annotations

import signal
import socket
import threading
import time
from dataclasses import dataclass

from specplan.core.errors import SpecplanError
from specplan.core.plan import floor_phrase
from specplan.runtime.build import prediction_lengths
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.engine import SpeculativeEngine
from specplan.serve.service import ServeSettings, Service, prediction_plan

GRACEFUL_SECONDS = 600  # longest a SIGTERM waits for the requests in flight


@dataclass(frozen=True)
class Address:
    host: str = "127.0.0.1"
    port: int = 8080


def bind(address: Address) -> socket.socket:
    """A listening socket on ``address`` (port 0: any free port); SpecplanError if it cannot be had."""
    family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((address.host, address.port))
    except OSError as error:
        sock.close()
        raise SpecplanError(f"cannot listen on {address.host}:{address.port} ({error.strerror}); pass another "
                            "--port or --host") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def warm_up(service: Service) -> None:
    """One short decode, so that the first client does not pay llama.cpp's first-call costs."""
    ids = [int(t) for t in service.tokenizer("Hello")["input_ids"]] or [0]
    service.runner.engine.generate(ids, 2, SamplingConfig())


def start_line(service: Service, sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    plan = service.runner.plan
    where = f"[{host}]" if ":" in host else host
    return (f"specplan serve: {plan.summary()} on {service.runner.backend}, model `{service.settings.alias}` at "
            f"http://{where}:{port}/v1; predicted {plan.predicted.tokens_per_s:.1f} tok/s, {floor_phrase(plan)}; "
            f"{decoding(service.settings.parallel)}, {service.settings.queue_size} more may wait; "
            f"{prediction_phrase(service)}" + (f"; by load: {service.load.describe()}" if service.load is not None else ""))


def prediction_phrase(service: Service) -> str:
    """How a request's ``prediction`` drafts: its first chain and the match that realigns it, from the plan's
    ``prediction`` section or the fixed rule (runtime/build.py ``prediction_lengths``)."""
    runner = service.runner
    engine = runner.engine if isinstance(runner.engine, SpeculativeEngine) else runner.plain
    plan = prediction_plan(runner.plan, service.settings)
    first, min_match = prediction_lengths(engine, plan)
    source = "planned" if plan is not None else "the fixed rule"
    return f"a prediction drafts {first} tokens after each alignment on {min_match} ({source})"


def decoding(parallel: int) -> str:
    return "one request decodes at a time" if parallel == 1 else f"{parallel} requests decode together"



def serve(runner, settings: ServeSettings, address: Address, log_level: str = "warning") -> int:
    """Serve until SIGINT or SIGTERM: uvicorn's event loop on a thread of its own, the decoding on this
    (the main) thread (serve/worker.py says why). A signal tells uvicorn to stop accepting and to wait
    for the connections in flight; their jobs decode here meanwhile; then it returns 0."""
    import uvicorn
    from sse_starlette.sse import AppStatus

    from specplan.serve.app import build_app

    sock = bind(address)
    service = Service(runner, settings)
    warm_up(service)
    AppStatus.disable_automatic_graceful_drain()  # a signal lets streams in flight finish
    config = uvicorn.Config(build_app(service), log_level=log_level, access_log=log_level in ("info", "debug"),
                            timeout_graceful_shutdown=GRACEFUL_SECONDS, lifespan="off")
    server = uvicorn.Server(config)
    loop = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="specplan-http", daemon=True)

    def stop(signum, frame) -> None:
        server.should_exit = True

    previous = {signum: signal.signal(signum, stop) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        loop.start()
        while not server.started and loop.is_alive():
            time.sleep(0.01)
        if not loop.is_alive():
            raise SpecplanError(f"the HTTP server did not start on {address.host}:{address.port}")
        print(start_line(service, sock), flush=True)
        service.worker.run(finished=lambda: not loop.is_alive())
    finally:
        server.should_exit = True
        loop.join(GRACEFUL_SECONDS)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        sock.close()
    return 0

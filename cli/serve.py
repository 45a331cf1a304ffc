"""``specplan serve PLAN``: the plan behind an OpenAI-compatible server (docs/guide.md, "Serve a plan")."""

from __future__ import annotations

from specplan.cli.options import integer


def add_parser(commands) -> None:
    parser = commands.add_parser("serve", help="serve plan.yaml over an OpenAI-compatible HTTP API")
    parser.add_argument("plan", help="plan.yaml written by `specplan plan` or `specplan profile`")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=integer(0, 65535), default=8080, help="port (default 8080; 0: any free port)")
    parser.add_argument("--alias", default="specplan", help="the model name clients send (default: specplan)")
    parser.add_argument("--queue", type=integer(1, 4096), default=16,
                        help="requests that may wait while one decodes; beyond them 429 (default 16)")
    parser.add_argument("--parallel", "-np", type=integer(1, 128), default=1,
                        help="requests decoded at once, their rounds in one batched forward (llama-server's -np; "
                             "default 1: one at a time); needs a static plan (on llama.cpp with fast numerics)")
    parser.add_argument("--threads", type=integer(0, 1024), default=0,
                        help="a plan on the llama.cpp backend: llama.cpp's CPU threads (default: every core)")
    parser.add_argument("--no-fallback", action="store_true",
                        help="play the plan every round, even where plain decoding is measured cheaper")
    parser.add_argument("--prediction-lengths", choices=("rule", "planned"), default="rule",
                        help="how a request's `prediction` drafts: the fixed rule (default; measured faster on edits) "
                             "or the plan's planned lengths (`specplan plan` writes them from a profile that replayed "
                             "predictions)")
    parser.add_argument("--force", action="store_true", help="serve even if the profile's device or model differ")
    parser.add_argument("--log-level", choices=("warning", "info", "debug"), default="warning",
                        help="uvicorn's log level; info adds one line per request (default warning)")
    parser.set_defaults(handler="serve")


def command(args) -> int:
    from specplan.api import Runner
    from specplan.core.errors import SpecplanError
    from specplan.serve.server import Address, bind, serve
    from specplan.serve.service import ServeSettings

    if not args.alias.strip():
        raise SpecplanError("--alias is empty; give the model name clients should send")
    bind(Address(args.host, args.port)).close()  # a taken port fails before the weights load
    runner = Runner.open(args.plan, force=args.force, threads=args.threads, fallback=not args.no_fallback,
                         parallel=args.parallel)
    settings = ServeSettings(args.alias, args.queue, not args.no_fallback, args.parallel, args.prediction_lengths)
    return serve(runner.plan_runner, settings, Address(args.host, args.port), args.log_level)

"""``specplan serve``: a plan behind an OpenAI-compatible HTTP server (docs/guide.md, "Serve a plan").

schema.py the request bodies and the error body; text.py tokens -> final text and stop strings;
worker.py the decoding thread and its bounded queue; service.py requests -> jobs -> response bodies;
metrics.py the Prometheus counters; app.py the Starlette routes; server.py binding and uvicorn.
"""

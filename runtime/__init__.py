"""Executor: models, drafters, tree verification, the speculative engine, the profiler (torch)."""

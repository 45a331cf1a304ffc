"""Core types every layer shares, torch-free: profile, plan, the draft-tree parent array, errors,
YAML I/O, drafter specs, prompts and the plan's contract (docs/architecture.md, bottom layer)."""

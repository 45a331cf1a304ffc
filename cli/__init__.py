"""The ``specplan`` command line: a module per verb, modules for a verb's variants beside it, shared
options; nothing imports it (docs/architecture.md, top layer)."""

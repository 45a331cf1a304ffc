"""The ``specplan`` command line, one module per verb; nothing imports it (docs/architecture.md, top layer)."""

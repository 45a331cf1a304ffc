"""A library that resets its logger at import (GPTQModel's logbar) is quieted again."""

from __future__ import annotations

import logging

from specplan.core import quiet


def test_quiet_again_restores_the_quiet_levels(monkeypatch):
    logger = logging.getLogger("logbar")
    monkeypatch.setattr(logger, "level", logging.INFO)
    monkeypatch.setitem(quiet._QUIET, "on", False)
    quiet.quiet_again()
    assert logger.level == logging.INFO  # nobody asked for quiet: left alone
    monkeypatch.setitem(quiet._QUIET, "on", True)
    quiet.quiet_again()
    assert logger.level == logging.ERROR

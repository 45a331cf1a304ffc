#!/usr/bin/env bash
# Set up .venv (if needed) and run the test suite; extra arguments go to pytest.
# Default: everything but tests marked slow (CI runs this), with the docstring examples of every
# module (pyproject.toml: --doctest-modules over specplan/); the 25 slowest tests are listed at
# the end. All tests: scripts/test.sh -m "slow or not slow".
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ "$#" -eq 0 ]; then
    set -- -m "not slow"
fi
exec .venv/bin/python -m pytest -q --durations=25 "$@"

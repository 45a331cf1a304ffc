#!/usr/bin/env bash
# Set up .venv (if needed) and run the test suite; extra arguments go to pytest.
# Default: everything but tests marked slow (CI runs this). All tests: scripts/test.sh -m "slow or not slow".
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ "$#" -eq 0 ]; then
    set -- -m "not slow"
fi
exec .venv/bin/python -m pytest -q "$@"

# Sourced by run.sh and test.sh: creates .venv with the pinned requirements, once.
# It reinstalls only when requirements.txt or pyproject.toml change.
set -euo pipefail
PYTHON_BIN=${PYTHON:-python3}
if ! "$PYTHON_BIN" -c 'import sys; sys.exit(sys.version_info[:2] < (3, 11))'; then
    echo "inferlab needs Python >= 3.11 (found $("$PYTHON_BIN" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2
    exit 1
fi
want=$(cat requirements.txt pyproject.toml | sha256sum | cut -c1-64)
stamp=.venv/.requirements.sha256
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo ">> setting up .venv (pinned requirements; torch==2.13.0 CPU build)" >&2
    "$PYTHON_BIN" -m venv .venv
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
    echo "$want" > "$stamp"
fi

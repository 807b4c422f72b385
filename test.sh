#!/usr/bin/env bash
# The test suite, including an end-to-end workflow run on a synthetic corpus and the
# sampling-workbench check in headless Chromium. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")"
source tools/bootstrap.sh
source tools/ensure_chromium.sh
exec .venv/bin/pytest "$@"

#!/usr/bin/env bash
# The main job: the full workflow, ending in reports/c13-report.html.
# Extra arguments go to snakemake, e.g. ./run.sh --config corpus_path=/path/to/corpus.txt
set -euo pipefail
cd "$(dirname "$0")"
source tools/bootstrap.sh
# The default profile (workflow/profiles/default, via the profiles link) is found automatically.
exec .venv/bin/snakemake --cores all "$@"

#!/usr/bin/env bash
# CI's cluster step: the quick DAG through SLURM, checked against the local quick run.
#
#   tools/slurm-quick-run.sh CORPUS [LOCAL_RUN_DIR [EXTRA_CONFIG.yaml ...]]
#
# Brings up the single-node cluster (tools/slurm-local.sh, needs root + apt), copies this
# checkout (tracked and untracked-but-not-ignored files, no results) to a temporary
# directory, runs the quick config there with --workflow-profile workflow/profiles/slurm,
# then compares every deterministic table with LOCAL_RUN_DIR's (default: this checkout,
# where .ci/run has just run the quick workflow locally) using tools/compare_runs.py.
# EXTRA_CONFIG files are merged over config/quick.yaml, as they were for the local run.
# By default the copy starts from LOCAL_RUN's results and Snakemake's records of them, and only
# the quickest job of each rule reruns, as a SLURM job (tools/slurm_rerun_picks.py, in waves so that
# a forced upstream job never drags its unpicked downstream along): each rule goes through sbatch
# once, and the comparison checks what those jobs wrote. INFERLAB_SLURM_REUSE=0 runs the whole DAG
# through SLURM instead, from nothing.
# The cluster is torn down and the copy removed on every exit, failures included.
# INFERLAB_SLURM_TIMEOUT (seconds, default 3600) bounds the cluster run.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
CORPUS=$(realpath "${1:?usage: $0 CORPUS [LOCAL_RUN_DIR]}")
LOCAL_RUN=$(realpath "${2:-.}")
EXTRA_CONFIGS=()
for extra in "${@:3}"; do EXTRA_CONFIGS+=("$(realpath "$extra")"); done
WORK=$(mktemp -d "${TMPDIR:-/tmp}/inferlab-slurm.XXXXXX")

cleanup() {
    local rc=$?
    tools/slurm-local.sh down || true
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT INT TERM

tools/slurm-local.sh up
git ls-files -z --cached --others --exclude-standard \
    | tar --null -T - --ignore-failed-read -cf - | tar -xf - -C "$WORK"
ln -s "$REPO/.venv" "$WORK/.venv"
REUSE=${INFERLAB_SLURM_REUSE:-1}
if [[ $REUSE == 1 ]]; then
    echo "== starting from $LOCAL_RUN's results; rerun through SLURM, the quickest job of each rule:"
    mapfile -t WAVES < <(.venv/bin/python tools/slurm_rerun_picks.py "$LOCAL_RUN")
    [[ ${#WAVES[@]} -gt 0 ]] || { echo "no finished job recorded in $LOCAL_RUN" >&2; exit 1; }
    cp -a "$LOCAL_RUN/results" "$WORK/"
    if [[ -d $LOCAL_RUN/reports ]]; then cp -a "$LOCAL_RUN/reports" "$WORK/"; fi
    mkdir -p "$WORK/.snakemake"
    cp -a "$LOCAL_RUN/.snakemake/metadata" "$WORK/.snakemake/"
else
    WAVES=("")  # one wave, no targets: the default target, everything through SLURM
fi

# The plugin polls 40 s after a submission and backs off by 10 s per idle poll; on this
# one-node test cluster, with a chain of jobs of a few seconds each, that waiting was a
# third of the step. 1 s is harmless here (the plugin still adds 10 s per idle poll); a shared
# cluster keeps the profile's default.
echo "== quick workflow through SLURM in $WORK"
start=$(date +%s)
for wave in "${WAVES[@]}"; do
    read -ra targets <<< "$wave"
    force=()
    [[ ${#targets[@]} -gt 0 ]] && force=(--force "${targets[@]}")
    (cd "$WORK" && timeout -k 60 "${INFERLAB_SLURM_TIMEOUT:-3600}" .venv/bin/snakemake "${force[@]}" \
        --workflow-profile workflow/profiles/slurm --slurm-status-command squeue \
        --slurm-init-seconds-before-status-checks 1 \
        --configfile config/quick.yaml "${EXTRA_CONFIGS[@]}" --config corpus_path="$CORPUS")
done
echo "== quick workflow through SLURM took $(( $(date +%s) - start )) s"
submitted=$(cat "$WORK"/.snakemake/log/*.snakemake.log | grep -c "submitted with SLURM jobid" || true)
echo "== $submitted jobs ran as SLURM jobs; the first ones and what squeue still knows:"
# awk reads its whole input: `| head` would close the pipe early, and under pipefail the
# writer's SIGPIPE (exit 141) would fail the step after the workflow itself succeeded.
awk '/submitted with SLURM jobid/ && n++ < 3' "$WORK"/.snakemake/log/*.snakemake.log
squeue -t all -o '%.8i %.10T %.10M %.20N' | awk 'NR <= 40'
[[ $submitted -gt 0 ]] || { echo "no job went through SLURM" >&2; exit 1; }

echo "== deterministic tables: local run vs SLURM run"
"$REPO/.venv/bin/python" tools/compare_runs.py "$LOCAL_RUN" "$WORK"

# Issue 14's reviewer diff between two independent quick runs (local and SLURM, same node):
# every deterministic metric must agree; timings are shown with their verdicts but not judged.
echo "== diff: local quick run -> SLURM quick run (python -m inferlab.report.changes)"
"$REPO/.venv/bin/python" -m inferlab.report.changes "$LOCAL_RUN/results/metrics.parquet" "$WORK/results/metrics.parquet" \
    --table "$WORK/diff.csv"
"$REPO/.venv/bin/python" - "$WORK/diff.csv" <<'PY'
import sys

import pandas as pd

diff = pd.read_csv(sys.argv[1])
moved = diff[~diff["timing"] & diff["verdict"].isin(["changed", "flipped", "added", "removed"])]
print(f"{len(diff)} metrics compared, {int(diff['timing'].sum())} of them timings; "
      f"{len(moved)} deterministic metrics moved")
sys.exit(f"deterministic metrics differ between the local and the SLURM run:\n{moved.to_string()}" if len(moved) else 0)
PY

"""Picks, for each rule of a finished run, its quickest job, and orders the picks in waves.

    python tools/slurm_rerun_picks.py RUN_DIR

CI's cluster step (tools/slurm-quick-run.sh) starts from a copy of the local quick run and
reruns only these jobs, with `snakemake --force` and their outputs as targets, so each rule goes
through sbatch exactly once, on its cheapest job, and the comparison with the local tables checks
that job's results. Reads Snakemake's own records (RUN_DIR/.snakemake/metadata: rule, job hash,
start and end time and inputs of each output file). A rule whose jobs all lasted the same picks the
job whose first output sorts first, so the choice is stable.

Prints one line per wave: the outputs of the picks to force together, relative to RUN_DIR. Snakemake
reruns everything downstream of a forced job that its targets need, so a pick feeding another
pick through a job that was not picked (the corpus, through the other trainings, into an
experiment) waits for a later wave: the downstream pick runs first, on the untouched upstream.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from collections import defaultdict
from pathlib import Path


def recorded_jobs(run_dir: Path) -> dict[str, list[dict]]:
    """rule -> its jobs, each {"start", "end", "outputs", "inputs"}, from the run's Snakemake metadata."""
    jobs: dict[tuple[str, int, float], dict] = {}
    metadata = run_dir / ".snakemake/metadata"
    for record_file in sorted(metadata.iterdir() if metadata.is_dir() else []):
        output = base64.urlsafe_b64decode(record_file.name).decode()
        record = json.loads(record_file.read_text(encoding="utf-8"))
        if record.get("incomplete") or record.get("starttime") is None:
            continue
        # one job's outputs share its hash and end time; each file has its own start time
        key = (record["rule"], record["job_hash"], record["endtime"])
        job = jobs.setdefault(key, {"start": record["starttime"], "end": record["endtime"], "outputs": [],
                                    "inputs": set(record.get("input", []))})
        job["start"] = min(job["start"], record["starttime"])
        job["outputs"].append(output)
    by_rule: dict[str, list[dict]] = defaultdict(list)
    for (rule, _, _), job in jobs.items():
        job["outputs"].sort()
        by_rule[rule].append(job)
    return dict(by_rule)


def quickest_job_outputs(run_dir: Path, jobs_by_rule: dict[str, list[dict]]) -> dict[str, list[str]]:
    """rule -> the outputs of its quickest recorded job (of recorded_jobs) that still exist in run_dir."""
    picks = {}
    for rule, jobs in sorted(jobs_by_rule.items()):
        present = [job for job in jobs if all((run_dir / path).exists() for path in job["outputs"])]
        if present:
            picks[rule] = min(present, key=lambda job: (job["end"] - job["start"], job["outputs"][0]))["outputs"]
        else:
            print(f"not picked: {rule} (no recorded job of it has all its outputs in {run_dir}, "
                  f"e.g. {jobs[0]['outputs'][0]})", file=sys.stderr)
    return picks


def waves(jobs_by_rule: dict[str, list[dict]], picks: dict[str, list[str]]) -> list[list[str]]:
    """The picks' outputs grouped into waves; a pick that reaches a later-wave pick only through
    other picks (or directly) shares its wave, one that reaches it through a job not picked does not."""
    jobs = [job for rule_jobs in jobs_by_rule.values() for job in rule_jobs]
    picked = {tuple(outputs) for outputs in picks.values()}
    producer = {path: job_index for job_index, job in enumerate(jobs) for path in job["outputs"]}
    consumers: dict[int, set[int]] = defaultdict(set)
    for job_index, job in enumerate(jobs):
        for path in job["inputs"]:
            if path in producer:
                consumers[producer[path]].add(job_index)
    is_pick = [tuple(job["outputs"]) in picked for job in jobs]

    def reaches_pick_through_unpicked(start: int) -> set[int]:
        found, seen, stack = set(), set(), [(start, False)]
        while stack:
            node, via_unpicked = stack.pop()
            for nxt in consumers[node]:
                if (nxt, via_unpicked) in seen:
                    continue
                seen.add((nxt, via_unpicked))
                if is_pick[nxt] and via_unpicked:
                    found.add(nxt)
                stack.append((nxt, via_unpicked or not is_pick[nxt]))
        return found

    wave: dict[int, int] = {}

    def wave_of(index: int) -> int:
        if index not in wave:
            wave[index] = 1 + max((wave_of(other) for other in reaches_pick_through_unpicked(index)), default=-1)
        return wave[index]

    grouped: dict[int, list[str]] = defaultdict(list)
    for index in sorted(i for i, pick in enumerate(is_pick) if pick):
        grouped[wave_of(index)].extend(jobs[index]["outputs"])
    return [sorted(grouped[n]) for n in sorted(grouped)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    args = parser.parse_args(argv)
    jobs_by_rule = recorded_jobs(args.run_dir)
    picks = quickest_job_outputs(args.run_dir, jobs_by_rule)
    if not picks:
        print(f"no finished job is recorded under {args.run_dir}/.snakemake/metadata", file=sys.stderr)
        return 1
    for rule, outputs in picks.items():
        print(f"{rule}: {' '.join(outputs)}", file=sys.stderr)
    for outputs in waves(jobs_by_rule, picks):
        print(" ".join(outputs))
    return 0


if __name__ == "__main__":
    sys.exit(main())

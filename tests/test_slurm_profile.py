"""The cluster profile parses, and asks for what the timing rules need.

`threads: workflow.cores` made every run under a cluster executor fail at parse time
("Workflow requires a total number of cores"): there is no --cores there. A dry run does not
show it (`-n` sets --cores 1), so the first test parses under the real SLURM executor with a
target that needs no job, which submits nothing and needs no cluster. The run through a real
(local) SLURM, where the timing jobs get compute.timing_threads CPUs, is .ci/run's cluster step
(tools/slurm-local.sh, tools/compare_runs.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import link_workflow, synthetic_corpus

ROOT = Path(__file__).resolve().parent.parent
PROFILE = ROOT / "workflow/profiles/slurm"
TIMING_RULES = {"train_model", "train_noise_rerun", "kvcache_timing", "kvcache_steps", "roofline_probe",
                "speculative_group", "quant_scheme"}
GPU_RULES = {"kvcache_timing", "kvcache_steps", "roofline_probe"}

pytest.importorskip("snakemake_executor_plugin_slurm", reason="pinned in requirements.txt")


def _workdir(path: Path) -> Path:
    link_workflow(path)
    (path / "corpus.txt").write_text(synthetic_corpus(n_chapters=4, paragraphs=3), encoding="utf-8")
    # a vocabulary this small corpus fills: the parse-time corpus check refuses one it cannot
    (path / "fits.yaml").write_text("corpus: {val_fraction: 0.1, vocab_size: 120}\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return _workdir(tmp_path_factory.mktemp("slurm-profile"))


def _snakemake(workdir: Path, *args: str, config: str = "") -> str:
    """`config` is YAML merged over the quick config."""
    (workdir / "extra.yaml").write_text(config or "{}\n", encoding="utf-8")
    cmd = [sys.executable, "-m", "snakemake", "--configfile", "config/quick.yaml", "fits.yaml", "extra.yaml",
           "--config", "corpus_path=corpus.txt", *args]
    result = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "INFERLAB_QUIET": "1"})
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    return output


def _jobs(output: str) -> dict[str, list[dict[str, str]]]:
    """Each planned job of a dry run as {rule: [{'threads': ..., 'resources': ...}, ...]}."""
    jobs: dict[str, list[dict[str, str]]] = {}
    for block in re.split(r"(?m)^(?=(?:local)?rule \w+:)", output):
        rule = re.search(r"^(?:local)?rule (\w+):", block, re.M)
        if rule:
            fields = dict(re.findall(r"^\s+(threads|resources): (.*)$", block, re.M))
            jobs.setdefault(rule.group(1), []).append(fields)
    return jobs


SLURM = ("--workflow-profile", str(PROFILE), "--executor", "slurm", "--slurm-status-command", "squeue")


def _slurm_dry_run(workdir: Path, config: str = "") -> dict[str, list[dict[str, str]]]:
    return _jobs(_snakemake(workdir, "-n", *SLURM, config=config))


def test_workflow_parses_under_the_slurm_executor_without_cores(tmp_path):
    # The prepared corpus is already there and newer than its input: nothing to submit, but
    # the whole workflow is parsed under the executor, with no total core count, exactly as
    # in a cluster run.
    workdir = _workdir(tmp_path)
    (workdir / "results/corpus").mkdir(parents=True)
    for name in ("normalised.txt", "train.npy", "val.npy", "vocab.json", "stats.json"):
        (workdir / "results/corpus" / name).write_text("stand-in\n")
    output = _snakemake(workdir, *SLURM, "results/corpus/stats.json")
    assert "Nothing to be done" in output, output[-3000:]


def test_profile_gives_timing_jobs_a_node_of_their_own(workdir):
    jobs = _slurm_dry_run(workdir)
    assert TIMING_RULES <= set(jobs), sorted(jobs)
    for rule in TIMING_RULES:
        for job in jobs[rule]:
            assert "slurm_extra=--exclusive" in job["resources"], (rule, job)
    for job in jobs["sampling_cell"]:
        assert "exclusive" not in job["resources"]


def test_gpu_requested_only_for_cuda_timing(workdir):
    cpu = _slurm_dry_run(workdir)
    cuda = _slurm_dry_run(workdir, "kvcache: {device: cuda}\n")
    for rule in GPU_RULES:
        assert all(re.search(r"\bgpu=1\b", job["resources"]) for job in cuda[rule]), (rule, cuda[rule])
        assert not any(re.search(r"\bgpu=1\b", job["resources"]) for job in cpu[rule]), rule
    assert not any(re.search(r"\bgpu=1\b", job["resources"]) for job in cuda["sampling_cell"])


def test_locally_timing_jobs_take_every_core(workdir):
    jobs = _jobs(_snakemake(workdir, "-n", "--cores", "5", config="compute: {timing_threads: 3}\n"))
    for rule in TIMING_RULES:
        assert all(job.get("threads") == "5" for job in jobs[rule]), (rule, jobs[rule])


def test_inside_a_cluster_job_timing_jobs_keep_the_requested_count(workdir):
    # the SLURM job runs snakemake in remote mode with --cores all (the whole node)
    jobs = _jobs(_snakemake(workdir, "-n", "--mode", "remote", "--cores", "8",
                            config="compute: {timing_threads: 3}\n"))
    for rule in TIMING_RULES:
        assert all(job.get("threads") == "3" for job in jobs[rule]), (rule, jobs[rule])

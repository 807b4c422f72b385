"""End to end: the whole quick DAG on a synthetic corpus, in a temporary directory.

Checks that a complete run leaves nothing to do, and that changing one setting reruns
only the jobs that depend on it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.conftest import synthetic_corpus

ROOT = Path(__file__).resolve().parent.parent
SNAKEMAKE = [sys.executable, "-m", "snakemake"]

TINY = {
    "corpus": {"val_fraction": 0.1, "vocab_size": 160},
    "architecture": {"n_layer": 2, "head_dim": 64, "max_seq_len": 128, "mlp_ratio": 4},
    "models": {"ref_baseline": {"d_model": 128}, "c1_dim128": {"d_model": 64}, "c1_dim64": {"d_model": 64}},
    "training": {"defaults": {"steps": 12, "batch_size": 4, "seq_len": 64, "warmup_steps": 2,
                              "eval_every": 6, "eval_windows": 2, "precision": "fp32"},
                 "overrides": {"c1_dim64": {"seed": 7}}},
    # compiling costs minutes on a busy 2-core machine; tests/test_engine.py covers the compiled engine
    "engine": ["eager"],
}


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return out


def _snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [*SNAKEMAKE, "--cores", "2", "--configfile", "config/quick.yaml", "tiny.yaml",
           "--config", "corpus_path=corpus.txt", *args]
    env = {**os.environ, "INFERLAB_QUIET": "1"}
    return subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, env=env, timeout=1500)


def _planned_jobs(output: str) -> dict[str, int]:
    """The 'Job stats' table of a dry run as {rule: count}."""
    counts = {}
    if "Job stats:" not in output:
        return counts
    table = output.split("Job stats:", 1)[1]
    for line in table.splitlines()[3:]:
        match = re.match(r"^(\w+)\s+(\d+)$", line.strip())
        if not match:
            break
        if match.group(1) != "total":
            counts[match.group(1)] = int(match.group(2))
    return counts


@pytest.fixture(scope="module")
def completed_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("workflow")
    for name in ("Snakefile", "workflow", "scripts", "config"):
        (workdir / name).symlink_to(ROOT / name)
    (workdir / "corpus.txt").write_text(synthetic_corpus(n_chapters=14, paragraphs=8), encoding="utf-8")
    quick = yaml.safe_load((ROOT / "config/quick.yaml").read_text(encoding="utf-8"))
    (workdir / "tiny.yaml").write_text(yaml.safe_dump(_merge(quick, TINY), allow_unicode=True), encoding="utf-8")
    result = _snakemake(workdir)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    return workdir


@pytest.mark.slow
def test_quick_dag_produces_checkpoints_tables_and_report(completed_run):
    meta = completed_run / "results/models/ref_baseline/meta.json"
    assert meta.exists() and (completed_run / "results/noise_floor.parquet").exists()
    floor = pd.read_parquet(completed_run / "results/noise_floor.parquet")
    assert len(floor) == 2  # base run + one extra seed in the quick config
    for name in ("c13-report.html", "c13-report.md", "c13-inference.json", "precomputed.json",
                 "sampling-workbench.html"):
        assert (completed_run / "reports" / name).stat().st_size > 0, name
    milestones = pd.read_parquet(completed_run / "results/milestones.parquet")
    assert sorted(milestones["milestone"]) == ["M1", "M2", "M3", "M4"]
    assert set(milestones["status"]) <= {"pass", "fail", "missing"}
    assert "missing" not in set(milestones["status"])


@pytest.mark.slow
def test_rerun_with_nothing_changed_does_nothing(completed_run):
    result = _snakemake(completed_run, "-n")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Nothing to be done" in result.stdout + result.stderr


@pytest.mark.slow
def test_changing_one_quant_scheme_reruns_only_that_job(completed_run):
    config = yaml.safe_load((completed_run / "tiny.yaml").read_text(encoding="utf-8"))
    schemes = config["quantization"]["schemes"]
    extra = next(s for s in ("int8_g64_sym", "int8_g128_sym", "int4_per_channel_sym") if s not in schemes)
    override = completed_run / "one-more-scheme.yaml"
    override.write_text(yaml.safe_dump({"quantization": {**config["quantization"], "schemes": [*schemes, extra]}}))
    result = _snakemake(completed_run, "-n", "--configfile", "config/quick.yaml", "tiny.yaml", override.name)
    jobs = _planned_jobs(result.stdout + result.stderr)
    assert jobs.pop("quant_scheme", 0) == 1, result.stdout[-3000:]
    assert set(jobs) <= {"quant_summary", "report", "all"}, jobs


@pytest.mark.slow
def test_changing_one_models_training_reruns_only_that_model(completed_run):
    override = completed_run / "draft-lr.yaml"
    config = yaml.safe_load((completed_run / "tiny.yaml").read_text(encoding="utf-8"))
    overrides = {**config["training"]["overrides"], "c1_dim64": {"seed": 7, "lr": 1.0e-3}}
    override.write_text(yaml.safe_dump({"training": {**config["training"], "overrides": overrides}}))
    result = _snakemake(completed_run, "-n", "--configfile", "config/quick.yaml", "tiny.yaml", override.name)
    jobs = _planned_jobs(result.stdout + result.stderr)
    assert jobs.get("train_model") == 1, result.stdout[-3000:]
    assert "train_noise_rerun" not in jobs and "quant_scheme" not in jobs, jobs
    assert "prepare_corpus" not in jobs, jobs


@pytest.mark.slow
def test_bad_config_key_fails_naming_it(completed_run):
    result = _snakemake(completed_run, "-n", "--config", "corpus_path=corpus.txt", "kvcache={'repz': 3}")
    assert result.returncode != 0
    assert "repz" in result.stdout + result.stderr


def test_missing_corpus_says_where_to_put_it(tmp_path):
    for name in ("Snakefile", "workflow", "scripts", "config"):
        (tmp_path / name).symlink_to(ROOT / name)
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump({"corpus_url": ""}))
    result = _snakemake(tmp_path, "--config", "corpus_path=nowhere/corpus.txt", "--",
                        "results/corpus/stats.json")
    assert result.returncode != 0
    assert "nowhere/corpus.txt" in result.stdout + result.stderr

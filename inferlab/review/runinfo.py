"""Provenance of the report itself: per-rule benchmarks and what this run rebuilt."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

# {column: the Snakemake benchmark column it is the median of}
BENCHMARK_COLUMNS = {"seconds": "s", "max_rss_mb": "max_rss", "cpu_time_s": "cpu_time", "mean_load": "mean_load"}


def benchmark_table(root: str | Path) -> pd.DataFrame:
    """One row per Snakemake benchmark file under root (results/benchmarks/**.tsv): job (its path below
    root, without .tsv), the median of each BENCHMARK_COLUMNS over its repeats, and its mtime."""
    rows = []
    for path in sorted(Path(root).rglob("*.tsv")):
        try:
            bench = pd.read_csv(path, sep="\t")
        except (OSError, ValueError):  # an empty file is a ValueError too (EmptyDataError)
            continue
        if not bench.empty and "s" in bench.columns:
            bench = bench.apply(pd.to_numeric, errors="coerce")
            rows.append({"job": str(path.relative_to(root).with_suffix("")),
                         **{out: float(bench[col].median()) if col in bench else float("nan")
                            for out, col in BENCHMARK_COLUMNS.items()}, "mtime": path.stat().st_mtime})
    return pd.DataFrame(rows, columns=["job", *BENCHMARK_COLUMNS, "mtime"])


def run_start() -> float | None:
    """Start time of the Snakemake run this job belongs to: the oldest ancestor process whose
    command line mentions snakemake. None when not run under Snakemake (or psutil is absent)."""
    try:
        import psutil
    except ImportError:
        return None
    start = None
    try:
        for proc in psutil.Process(os.getpid()).parents():
            try:
                if "snakemake" in " ".join(proc.cmdline()):
                    start = proc.create_time()  # keep walking: the outermost one is the run
            except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
                continue
    except psutil.Error:
        return None
    return start


def classify_outputs(paths: list[str], start: float | None) -> pd.DataFrame:
    """'rebuilt' when a file was written after the run started, else 'reused' (from an earlier run)."""
    rows = []
    for p in sorted(set(paths)):
        exists = Path(p).exists()
        mtime = Path(p).stat().st_mtime if exists else float("nan")
        status = ("absent" if not exists else "unknown (not run by Snakemake)" if start is None
                  else "rebuilt" if mtime >= start else "reused")
        rows.append({"path": p, "status": status, "mtime": mtime})
    return pd.DataFrame(rows, columns=["path", "status", "mtime"])

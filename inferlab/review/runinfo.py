"""Provenance of the report itself: per-rule benchmarks and what this run rebuilt."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd


def benchmark_table(root: str | Path) -> pd.DataFrame:
    """One row per Snakemake benchmark file under root (results/benchmarks/**.tsv).

    Columns: job (path below root, without .tsv), seconds, max_rss_mb, cpu_time_s, mean_load.
    A benchmark with several repeats contributes its median.
    """
    rows = []
    for path in sorted(Path(root).rglob("*.tsv")):
        try:
            bench = pd.read_csv(path, sep="\t")
        except (OSError, ValueError, pd.errors.EmptyDataError):
            continue
        if bench.empty or "s" not in bench.columns:
            continue
        num = bench.apply(pd.to_numeric, errors="coerce")
        rows.append(
            {
                "job": str(path.relative_to(root).with_suffix("")),
                "seconds": float(num["s"].median()),
                "max_rss_mb": float(num["max_rss"].median()) if "max_rss" in num else float("nan"),
                "cpu_time_s": float(num["cpu_time"].median()) if "cpu_time" in num else float("nan"),
                "mean_load": float(num["mean_load"].median()) if "mean_load" in num else float("nan"),
                "mtime": path.stat().st_mtime,
            }
        )
    return pd.DataFrame(rows, columns=["job", "seconds", "max_rss_mb", "cpu_time_s", "mean_load", "mtime"])


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
                cmdline = " ".join(proc.cmdline())
                if "snakemake" in cmdline:
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
        path = Path(p)
        if not path.exists():
            rows.append({"path": p, "status": "absent", "mtime": float("nan")})
            continue
        mtime = path.stat().st_mtime
        status = "unknown (not run by Snakemake)" if start is None else ("rebuilt" if mtime >= start else "reused")
        rows.append({"path": p, "status": status, "mtime": mtime})
    return pd.DataFrame(rows, columns=["path", "status", "mtime"])

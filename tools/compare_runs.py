"""Compares the deterministic tables of two runs of the workflow (e.g. local vs SLURM).

    python tools/compare_runs.py RUN_A RUN_B [--rtol 0]

RUN_A and RUN_B are workflow directories (each with results/). Compared: the corpus stats,
each model's parameter count, config and weights hash (meta.json), the sampling distribution,
the speculative greedy-identity check and the quantization quality columns (loss, Δloss, KL,
top-1 agreement, effective bits, verdicts). Timing columns are skipped: they measure the
machine, not the code. By default numbers must be equal; --rtol allows a relative tolerance
for runs on different hardware. Exits 1 and lists every difference when anything differs.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

import pandas as pd

PARQUET_TABLES = [
    "results/sampling/distribution.parquet",
    "results/speculative/greedy_identity.parquet",
    "results/quant/summary.parquet",
]
# columns that measure speed, not results
TIMING_COLUMN = re.compile(r"(_ms|ms_per|_s$|seconds|speedup|per_s|wall|elapsed|time)")
META_KEYS = ["params", "model_config", "weights_sha256", "corpus_sha256", "val_loss"]


def _equal(a, b, rtol: float) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) and math.isnan(b):
            return True
        return math.isclose(a, b, rel_tol=rtol, abs_tol=0.0) if rtol else a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k], rtol) for k in a)
    return a == b


def compare_json(path: str, a: dict, b: dict, keys: list[str] | None, rtol: float) -> list[str]:
    keys = keys if keys is not None else sorted(set(a) | set(b))
    return [f"{path}: {key}: {a.get(key)!r} != {b.get(key)!r}"
            for key in keys if (key in a or key in b) and not _equal(a.get(key), b.get(key), rtol)]


def compare_frames(path: str, a: pd.DataFrame, b: pd.DataFrame, rtol: float) -> tuple[list[str], list[str]]:
    """Differences, and the columns compared."""
    if list(a.columns) != list(b.columns):
        return [f"{path}: columns differ: {list(a.columns)} vs {list(b.columns)}"], []
    if len(a) != len(b):
        return [f"{path}: {len(a)} rows vs {len(b)}"], []
    columns = [c for c in a.columns if not TIMING_COLUMN.search(c)]
    problems = []
    for column in columns:
        for row, (x, y) in enumerate(zip(a[column].tolist(), b[column].tolist(), strict=True)):
            x = float(x) if isinstance(x, int | float) and not isinstance(x, bool) else x
            y = float(y) if isinstance(y, int | float) and not isinstance(y, bool) else y
            if not _equal(x, y, rtol):
                problems.append(f"{path}: row {row} column {column}: {x!r} != {y!r}")
    return problems, columns


def compare_runs(run_a: Path, run_b: Path, rtol: float = 0.0) -> list[str]:
    problems: list[str] = []

    def load_json(rel: str) -> tuple[dict, dict] | None:
        missing = [str(run / rel) for run in (run_a, run_b) if not (run / rel).is_file()]
        if missing:
            problems.append(f"missing: {', '.join(missing)}")
            return None
        return tuple(json.loads((run / rel).read_text(encoding="utf-8")) for run in (run_a, run_b))

    stats = load_json("results/corpus/stats.json")
    if stats:
        problems += compare_json("results/corpus/stats.json", *stats, None, rtol)
        print(f"corpus stats: {len(stats[0])} fields compared")
    metas = sorted({p.relative_to(run).as_posix() for run in (run_a, run_b)
                    for p in (run / "results/models").glob("*/meta.json")})
    if not metas:
        problems.append("no results/models/*/meta.json in either run")
    for rel in metas:
        pair = load_json(rel)
        if pair:
            problems += compare_json(rel, *pair, META_KEYS, rtol)
            print(f"{rel}: params {pair[0].get('params')} vs {pair[1].get('params')}")
    for rel in PARQUET_TABLES:
        missing = [str(run / rel) for run in (run_a, run_b) if not (run / rel).is_file()]
        if missing:
            problems.append(f"missing: {', '.join(missing)}")
            continue
        found, columns = compare_frames(rel, pd.read_parquet(run_a / rel), pd.read_parquet(run_b / rel), rtol)
        problems += found
        print(f"{rel}: {len(columns)} columns compared ({', '.join(columns)})")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_a", type=Path)
    parser.add_argument("run_b", type=Path)
    parser.add_argument("--rtol", type=float, default=0.0, help="relative tolerance for numbers (default: equal)")
    args = parser.parse_args(argv)
    problems = compare_runs(args.run_a, args.run_b, args.rtol)
    if problems:
        print(f"{len(problems)} differences between {args.run_a} and {args.run_b}:", *problems, sep="\n  ")
        return 1
    print(f"every deterministic table is identical in {args.run_a} and {args.run_b}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

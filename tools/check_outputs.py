"""CI check after the quick workflow: every promised output exists and is non-empty.

Prints the milestone table so the CI log shows what the run concluded.
"""

import sys
from pathlib import Path

import pandas as pd

REQUIRED = [
    "results/corpus/stats.json",
    "results/models/ref_baseline/meta.json",
    "results/models/c1_dim128/meta.json",
    "results/models/c1_dim64/meta.json",
    "results/noise_floor.parquet",
    "results/kvcache/timings.parquet",
    "results/roofline.parquet",
    "results/sampling/distribution.parquet",
    "results/sampling/repetition.parquet",
    "results/speculative/summary.parquet",
    "results/quant/summary.parquet",
    "results/milestones.parquet",
    "results/metrics.parquet",
    "reports/c13-bundle.zip",
    "reports/c13-bundle.zip.sha256",
    "reports/c13-report.html",
    "reports/c13-report.md",
    "reports/c13-inference.json",
    "reports/precomputed.json",
    "reports/sampling-workbench.html",
]

missing = [p for p in REQUIRED if not Path(p).is_file() or Path(p).stat().st_size == 0]
if missing:
    sys.exit("missing or empty outputs:\n  " + "\n  ".join(missing))
milestones = pd.read_parquet("results/milestones.parquet")
print(milestones[["milestone", "status"]].to_string(index=False))
print(f"all {len(REQUIRED)} required outputs present")

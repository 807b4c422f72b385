"""The repetition summary's shape, torch-free so the report reads it without the model.

The producer (sampling_repetition) writes the summary tidy: one row per (cell, metric) with mean
and 95% bootstrap CI. `wide_summary` is the one pivot to one row per cell that the default rules,
the report's table and its figure all use.
"""

from __future__ import annotations

import pandas as pd

METRICS = ("seq_rep_4", "distinct_1", "distinct_2", "in_corpus_4gram_share", "nll_per_token",
           "zipf_coefficient")
CELL_COLUMNS = ["cell", "truncation", "temperature", "top_p", "min_p"]


def wide_summary(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per cell (the index): <metric>, <metric>_ci_low, <metric>_ci_high."""
    wide = summary.pivot(index="cell", columns="metric", values=["mean", "ci_low", "ci_high"])
    out = summary.drop_duplicates("cell").set_index("cell")[CELL_COLUMNS[1:]]
    for metric in METRICS:
        out[metric] = wide[("mean", metric)]
        out[f"{metric}_ci_low"] = wide[("ci_low", metric)]
        out[f"{metric}_ci_high"] = wide[("ci_high", metric)]
    return out

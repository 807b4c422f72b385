"""Experiment 2's aggregation of the scored samples: bootstrap CIs per cell and metric, and a few
example texts per cell (torch-free: the aggregation job only reads the cells' tables)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import pandas as pd

from inferlab.sampling.summary_table import CELL_COLUMNS, METRICS


def bootstrap_means(values: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """Bootstrap means of the rows of values (n,) or (n, M): (resamples,) or (resamples, M).

    Rows are resampled together (a draw keeps a sample's metrics side by side); NaN entries
    (a metric undefined on that sample) are left out of each mean.
    """
    values = np.asarray(values, dtype=np.float64)
    rng = np.random.default_rng(seed)
    drawn = values[rng.integers(0, len(values), size=(resamples, len(values)))]
    with warnings.catch_warnings():  # an all-NaN draw is a NaN mean, not an error
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(drawn, axis=1)


def bootstrap_ci(values: Sequence[float], resamples: int, seed: int,
                 level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): percentile bootstrap of the mean over the samples where it is defined."""
    values = np.asarray(values, dtype=np.float64)
    values = values[~np.isnan(values)]
    if not len(values):
        return float("nan"), float("nan"), float("nan")
    means = bootstrap_means(values, resamples, seed)
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(means, [alpha, 1.0 - alpha])
    return float(values.mean()), float(low), float(high)


def summarise(samples: pd.DataFrame, resamples: int, seed: int) -> pd.DataFrame:
    """Tidy summary: one row per (cell, metric) with mean and 95% CI.

    The bootstrap resamples the cell's (prompt, sample) rows; every cell uses the same
    bootstrap seed, so the CIs of different cells are drawn the same way. The human reference row
    (no temperature / top-p / min-p: NaN) is kept, hence dropna=False.
    """
    rows = []
    for keys, group in samples.groupby(CELL_COLUMNS, sort=False, dropna=False):
        for metric in METRICS:
            mean, low, high = bootstrap_ci(group[metric].to_numpy(), resamples, seed)
            rows.append({**dict(zip(CELL_COLUMNS, keys, strict=True)), "metric": metric, "mean": mean,
                         "ci_low": low, "ci_high": high, "n_samples": len(group),
                         "n_prompts": group["prompt"].nunique(), "resamples": resamples})
    return pd.DataFrame(rows)


def example_texts(samples: pd.DataFrame, per_cell: int) -> pd.DataFrame:
    """A few texts per cell: sample 0 of the first prompts, then sample 1, ..."""
    prompt_rank = {p: i for i, p in enumerate(dict.fromkeys(samples["prompt"]))}
    ordered = samples.assign(_rank=samples["prompt"].map(prompt_rank))
    ordered = ordered.sort_values(["sample", "_rank"], kind="stable")
    picked = ordered.groupby("cell", sort=False).head(per_cell)
    cell_order = {c: i for i, c in enumerate(dict.fromkeys(samples["cell"]))}
    picked = picked.assign(_cell=picked["cell"].map(cell_order)).sort_values(["_cell", "sample", "_rank"])
    return picked[[*CELL_COLUMNS, "prompt", "sample", "seq_rep_4", "in_corpus_4gram_share",
                   "text"]].reset_index(drop=True)

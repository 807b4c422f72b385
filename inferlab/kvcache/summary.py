"""Experiment 1's summary: medians and paired speed ratios per length, and the fit of the
uncached step time as a + b·positions that explains them (torch-free: the summary job only
aggregates the timing tables)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from inferlab.core.engine_rows import EAGER_CALLS, sum_known, total_eager_calls
from inferlab.kvcache.flops import flop_estimate_ratio, generation_flops

if TYPE_CHECKING:
    from inferlab.core.config import GPTConfig


def fit_line(x, y) -> tuple[float, float, float]:
    """Least squares y = a + b·x; returns (a, b, r²)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    design = np.column_stack([np.ones_like(x), x])
    (a, b), *_ = np.linalg.lstsq(design, y, rcond=None)
    residual = y - (a + b * x)
    total = ((y - y.mean()) ** 2).sum()
    r2 = 1.0 - (residual ** 2).sum() / total if total > 0 else float("nan")
    return float(a), float(b), float(r2)


def step_positions_of_generation(prompt_len: int, length: int) -> np.ndarray:
    """Positions each uncached pass runs over: P, P+1, ..., P+length-1."""
    return prompt_len + np.arange(length)


def predicted_no_cache_ms(a: float, b: float, prompt_len: int, length: int) -> float:
    """total_ms(n) = Σ over the n uncached passes of (a + b·positions)."""
    return float((a + b * step_positions_of_generation(prompt_len, length)).sum())


def fit_totals(lengths, totals_ms, prompt_len: int) -> tuple[float, float, float]:
    """Fits a, b from whole-generation times: total = n·a + b·Σpositions, no intercept."""
    n = np.asarray(lengths, dtype=float)
    sums = np.array([step_positions_of_generation(prompt_len, int(k)).sum() for k in lengths], dtype=float)
    y = np.asarray(totals_ms, dtype=float)
    (a, b), *_ = np.linalg.lstsq(np.column_stack([n, sums]), y, rcond=None)
    residual = y - (a * n + b * sums)
    total = ((y - y.mean()) ** 2).sum()
    r2 = 1.0 - (residual ** 2).sum() / total if total > 0 else float("nan")
    return float(a), float(b), float(r2)


def paired_ratios(timings: pd.DataFrame) -> pd.DataFrame:
    """no_cache / cache total time for each (length, rep): the pairs ran back to back."""
    wide = timings.pivot_table(index=["length", "rep"], columns="mode", values="total_ms").reset_index()
    wide["speed_ratio"] = wide["no_cache"] / wide["cache"]
    return wide


def summarize_timings(timings: pd.DataFrame) -> pd.DataFrame:
    """Median/min/max per (length, mode); the speed ratio repeats on both rows of a length.

    speed_ratio is the median of the per-rep ratios (each pair ran back to back);
    ratio_of_medians is median(no_cache)/median(cache), for reference. eager_calls is the total of the
    reps' forwards that ran eagerly (NaN for timings from before that count).
    """
    counted = EAGER_CALLS in timings.columns
    stats = (timings.groupby(["length", "mode"])
             .agg(reps=("rep", "nunique"),
                  total_ms_median=("total_ms", "median"), total_ms_min=("total_ms", "min"),
                  total_ms_max=("total_ms", "max"),
                  ms_per_token_median=("ms_per_token", "median"), ms_per_token_min=("ms_per_token", "min"),
                  ms_per_token_max=("ms_per_token", "max"),
                  same_output_all=("same_output", "all"),
                  kv_bytes_per_token=("kv_bytes_per_token", "first"),
                  **({EAGER_CALLS: (EAGER_CALLS, sum_known)} if counted else {}))
             .reset_index())
    if not counted:
        stats[EAGER_CALLS] = np.nan
    ratios = (paired_ratios(timings).groupby("length")["speed_ratio"]
              .agg(speed_ratio="median", speed_ratio_min="min", speed_ratio_max="max").reset_index())
    medians = stats.pivot(index="length", columns="mode", values="total_ms_median")
    ratios["ratio_of_medians"] = (medians["no_cache"] / medians["cache"]).reindex(ratios["length"]).to_numpy()
    meta = timings.groupby("length")[["device", "threads", "prompt_tokens"]].first().reset_index()
    return stats.merge(ratios, on="length").merge(meta, on="length")


def fit_table(timings: pd.DataFrame, summary: pd.DataFrame, steps: pd.DataFrame, config: GPTConfig) -> pd.DataFrame:
    """One row per length: the fit (repeated), the ratio it predicts, and the FLOP estimate.

    The main fit uses the single-step probe (uncached passes timed at several sequence
    lengths, every rep a point); a second fit from whole-generation totals is a cross-check.
    The measured times and ratio belong to `summary` (summarize_timings); they are read from
    it, not stored again, so each number lives in one table. eager_calls_steps is the total of the
    step probes' forwards that ran eagerly (NaN for probes from before that count).
    """
    prompt_len = int(timings["prompt_tokens"].iloc[0])
    uncached = steps[steps["mode"] == "no_cache"]
    cached = steps[steps["mode"] == "cache"]
    a, b, r2 = fit_line(uncached["positions"], uncached["step_ms"])
    a_c, b_c, r2_c = fit_line(cached["positions"], cached["step_ms"])
    no_cache = timings[timings["mode"] == "no_cache"]
    a_t, b_t, r2_t = fit_totals(no_cache["length"], no_cache["total_ms"], prompt_len)
    steps_eager_calls = total_eager_calls(steps)
    rows = []
    for length, group in summary.groupby("length"):
        by_mode = group.set_index("mode")
        cache_ms = float(by_mode.loc["cache", "total_ms_median"])
        predicted_ms = predicted_no_cache_ms(a, b, prompt_len, int(length))
        rows.append({
            "length": int(length), "prompt_tokens": prompt_len,
            "a_ms": a, "b_ms_per_position": b, "r2": r2, "fit_points": len(uncached),
            "a_cache_ms": a_c, "b_cache_ms_per_position": b_c, "r2_cache": r2_c,
            "a_ms_from_totals": a_t, "b_ms_per_position_from_totals": b_t, "r2_from_totals": r2_t,
            "predicted_no_cache_total_ms": predicted_ms,
            # Share of the uncached generation that is the fixed per-step cost n·a.
            "fixed_share_no_cache": int(length) * a / predicted_ms,
            "predicted_ratio": predicted_ms / cache_ms,
            "prediction_error": predicted_ms / cache_ms / float(by_mode.loc["cache", "speed_ratio"]) - 1.0,
            "flop_estimate_ratio": flop_estimate_ratio(config, prompt_len, int(length)),
            "cache_flops_per_token": generation_flops(config, prompt_len, int(length), True) / length,
            "no_cache_flops_per_token": generation_flops(config, prompt_len, int(length), False) / length,
            "eager_calls_steps": steps_eager_calls,
        })
    return pd.DataFrame(rows)

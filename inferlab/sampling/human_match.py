"""Experiment 2's default rule `human_match`: the sampling cell whose text statistics are closest
to held-out human text (Holtzman et al. 2020 choose nucleus sampling the same way)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from inferlab.sampling.aggregate import bootstrap_means
from inferlab.sampling.grid import GREEDY, HUMAN

# seq-rep-4 and distinct-2 (repetition), the in-corpus share (copying), the target's NLL per
# token (how likely the text is) and the Zipf coefficient (the shape of the word distribution).
# distinct-1 is reported but left out: it measures the same thing as distinct-2, and counting it
# would give repetition a third vote.
DISTANCE_METRICS = ("seq_rep_4", "distinct_2", "in_corpus_4gram_share", "nll_per_token", "zipf_coefficient")
SAMPLED = ("top_p", "min_p")
KNOBS = ["truncation", "temperature", "top_p", "min_p"]


def metric_spreads(point: pd.DataFrame) -> pd.Series:
    """Scale of each metric: the standard deviation of its cell means over the sampled cells.

    The std rather than the range, because the range is set by the single most extreme cell (the
    hottest, untruncated one reads as noise) and would shrink every other difference; greedy and the
    human row are left out so the scale is the grid's own. A metric with zero or undefined spread
    cannot tell cells apart and gets weight 0 (its spread is reported as NaN).
    """
    sampled = point[point["truncation"].isin(SAMPLED)]
    spread = sampled[list(DISTANCE_METRICS)].std(ddof=0)
    return spread.where(spread > 0)


def _weighted_gap(cell: np.ndarray, human: np.ndarray, spread: np.ndarray) -> np.ndarray:
    """sum over metrics of |cell - human| / spread (metrics with NaN spread weigh 0); last axis = metrics."""
    terms = np.abs(cell - human) / spread
    return np.where(np.isnan(spread), 0.0, terms).sum(axis=-1)


def cell_distances(samples: pd.DataFrame, resamples: int, seed: int, level: float = 0.95) -> pd.DataFrame:
    """Distance of every cell (greedy included, human excluded) to the human row, with a CI.

    1. point: the per-cell means of DISTANCE_METRICS, the spreads over the sampled cells, and
       distance = sum_m |cell_m - human_m| / spread_m;
    2. CI: each cell's (prompt, sample) rows are bootstrapped with the cells' common seed, the human
       rows with seed + 1 (one draw shared by all cells, so every cell meets the same reference
       noise), the spreads stay fixed, and the percentile interval of the resampled distances is
       reported. The per-metric terms are kept as term_<metric> columns.
    """
    if HUMAN not in set(samples["cell"]):
        raise ValueError("the samples have no human reference row (cell 'human')")
    metrics = list(DISTANCE_METRICS)
    groups = {cell: group for cell, group in samples.groupby("cell", sort=False)}
    point = pd.DataFrame({cell: {**group.iloc[0][KNOBS].to_dict(), **group[metrics].mean().to_dict()}
                          for cell, group in groups.items()}).T
    spread = metric_spreads(point.assign(**{m: point[m].astype(float) for m in metrics}))
    spread_values = spread[metrics].to_numpy(dtype=np.float64)
    human_point = point.loc[HUMAN, metrics].to_numpy(dtype=np.float64)
    human_boot = bootstrap_means(groups[HUMAN][metrics].to_numpy(), resamples, seed + 1)
    alpha = (1.0 - level) / 2.0
    rows = []
    for cell, group in groups.items():
        if cell == HUMAN:
            continue
        cell_point = point.loc[cell, metrics].to_numpy(dtype=np.float64)
        boot = _weighted_gap(bootstrap_means(group[metrics].to_numpy(), resamples, seed), human_boot,
                             spread_values)
        low, high = np.nanquantile(boot, [alpha, 1.0 - alpha])
        terms = np.where(np.isnan(spread_values), 0.0, np.abs(cell_point - human_point) / spread_values)
        rows.append({"cell": cell, **group.iloc[0][KNOBS].to_dict(),
                     "distance": float(_weighted_gap(cell_point, human_point, spread_values)),
                     "distance_ci_low": float(low), "distance_ci_high": float(high),
                     "eligible": group.iloc[0]["truncation"] in SAMPLED,
                     **{f"term_{m}": float(t) for m, t in zip(metrics, terms, strict=True)},
                     **{f"spread_{m}": float(s) for m, s in zip(metrics, spread_values, strict=True)},
                     "n_samples": len(group), "resamples": resamples})
    return pd.DataFrame(rows)


def rule_text() -> str:
    return ("default = the sampling cell (greedy is scored but never eligible) closest to held-out human "
            "text: distance = sum over seq-rep-4, distinct-2, in-corpus 4-gram share, the target's NLL per "
            "token and the Zipf coefficient of |cell mean - human mean| / (std of that metric's means "
            "across the sampled cells), with a 95% bootstrap CI. Cells whose distance CI overlaps the "
            "closest cell's are tied; a tie goes to the simpler setting: top-p before min-p, then T closer "
            "to 1, then the smaller distance. Min-p therefore replaces top-p only when the closest min-p "
            "cell's CI overlaps no top-p cell's CI (closer beyond noise).")


def _tie_break(tied: pd.DataFrame) -> str:
    # |T - 1| rounded, so that 0.7 and 1.3 count as equally far from 1 (float error says otherwise)
    order = tied.assign(_minp=tied["truncation"] == "min_p",
                        _dT=(tied["temperature"].astype(float) - 1.0).abs().round(9))
    return str(order.sort_values(["_minp", "_dT", "distance"], kind="stable").index[0])


def _numbers(prefix: str, table: pd.DataFrame, cell: str | None) -> dict:
    keys = ("distance", "distance_ci_low", "distance_ci_high")
    if cell is None:
        return {f"{prefix}_cell": None, **{f"{prefix}_{k}": float("nan") for k in keys}}
    return {f"{prefix}_cell": cell, **{f"{prefix}_{k}": float(table.loc[cell, k]) for k in keys}}


def _overlaps(table: pd.DataFrame, cell: str) -> pd.Series:
    """Which cells' distance CIs overlap this cell's."""
    low, high = table.loc[cell, "distance_ci_low"], table.loc[cell, "distance_ci_high"]
    return (table["distance_ci_low"] <= high) & (table["distance_ci_high"] >= low)


def _min_p_decision(sampled: pd.DataFrame, chosen: str, best_top_p: str | None,
                    best_min_p: str | None) -> tuple[str, str]:
    if best_min_p is None:
        return "keep top-p", "no min-p cells in the grid"
    if best_top_p is None:
        return "switch to min-p", "no top-p cells in the grid"
    mp, tp = sampled.loc[best_min_p], sampled.loc[best_top_p]
    top_p_overlapping = sampled[(sampled["truncation"] == "top_p") & _overlaps(sampled, best_min_p)]
    switch = sampled.loc[chosen, "truncation"] == "min_p"
    reason = (f"closest min-p {best_min_p}: distance {mp['distance']:.3f} [{mp['distance_ci_low']:.3f}, "
              f"{mp['distance_ci_high']:.3f}] vs closest top-p {best_top_p}: {tp['distance']:.3f} "
              f"[{tp['distance_ci_low']:.3f}, {tp['distance_ci_high']:.3f}]; top-p cells whose CI overlaps "
              f"the min-p cell's: {len(top_p_overlapping)}")
    return ("switch to min-p" if switch else "keep top-p"), reason


def choose_human_match(distances: pd.DataFrame, summary_wide: pd.DataFrame, distribution: pd.DataFrame) -> dict:
    """Apply the human_match rule; returns one flat record with every number the decision used.

    distances: `cell_distances`; summary_wide: `summary_table.wide_summary` (metric means and CIs,
    human row included); distribution: the next-token table (cell, kept, entropy_nats, entropy_bits).
    """
    table = distances.set_index("cell")
    sampled = table[table["eligible"]]
    if sampled.empty:
        raise ValueError("no sampling cells besides greedy")
    best = str(sampled["distance"].idxmin())
    tied = sampled[_overlaps(sampled, best)]
    chosen = _tie_break(tied)
    others = sampled.drop(index=chosen)
    runner_up = str(others["distance"].idxmin()) if len(others) else None
    by_kind = {kind: sampled[sampled["truncation"] == kind] for kind in SAMPLED}
    best_top_p, best_min_p = (str(g["distance"].idxmin()) if len(g) else None for g in by_kind.values())
    decision, reason = _min_p_decision(sampled, chosen, best_top_p, best_min_p)
    dist = distribution.set_index("cell")
    row, human = summary_wide.loc[chosen], summary_wide.loc[HUMAN]
    greedy = summary_wide.loc[GREEDY] if GREEDY in summary_wide.index else None
    cited = {}
    for metric in DISTANCE_METRICS:
        for suffix in ("", "_ci_low", "_ci_high"):
            cited[f"{metric}{suffix}"] = float(row[f"{metric}{suffix}"])
        cited[f"human_{metric}"] = float(human[metric])
    return {
        "kind": "human_match", "cell": chosen, "truncation": row["truncation"],
        "temperature": float(row["temperature"]), "top_p": float(row["top_p"]), "min_p": float(row["min_p"]),
        "rule": rule_text(), "rule_satisfied": True,
        **{k.removeprefix("chosen_"): v for k, v in _numbers("chosen", table, chosen).items() if k != "chosen_cell"},
        "closest_cell": best, "tied_cells": ", ".join(tied.index), "n_tied": len(tied),
        **_numbers("runner_up", table, runner_up),
        **_numbers("greedy", table, GREEDY if GREEDY in table.index else None),
        **_numbers("best_top_p", table, best_top_p), **_numbers("best_min_p", table, best_min_p),
        "min_p_decision": decision, "min_p_reason": reason,
        "kept": int(dist.loc[chosen, "kept"]) if chosen in dist.index else -1,
        **{k: float(dist.loc[chosen, k]) if chosen in dist.index else float("nan")
           for k in ("entropy_nats", "entropy_bits")},
        **cited,
        **{f"greedy_{m}": float(greedy[m]) if greedy is not None else float("nan")
           for m in ("seq_rep_4", "in_corpus_4gram_share")},
        "sampling_cells": len(sampled),
    }

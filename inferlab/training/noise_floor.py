"""The noise floor: k sigma of the final validation loss over reruns that differ only in seed."""

from __future__ import annotations

import statistics

import pandas as pd

from inferlab.jobs.configcheck import RELIABLE_NOISE_RUNS


def noise_floor_table(runs: list[dict], sigmas: float, use: str, fixed_value: float) -> pd.DataFrame:
    """runs: dicts with name, seed, val_loss. One row per run; floor columns repeat on every row."""
    if len(runs) < 2:
        raise ValueError("a noise floor needs at least two runs")
    losses = [r["val_loss"] for r in runs]
    std = statistics.stdev(losses)
    measured = sigmas * std
    reliable = len(runs) >= RELIABLE_NOISE_RUNS
    # With 2 runs the standard deviation rests on one difference: the floor may be far too small.
    note = "" if reliable else (f"floor from {len(runs)} runs (fewer than {RELIABLE_NOISE_RUNS}): its sigma rests "
                                f"on {len(runs) - 1} degree(s) of freedom and is unreliable")
    rows = [{
        "run": r["name"], "seed": r["seed"], "val_loss": r["val_loss"],
        "n_runs": len(runs), "mean_val_loss": statistics.fmean(losses), "std": std,
        "range": max(losses) - min(losses), "sigmas": sigmas, "floor_measured": measured,
        "floor_fixed": fixed_value, "floor_source": use,
        "floor": measured if use == "measured" else fixed_value,
        "floor_reliable": reliable, "floor_reliability_note": note,
    } for r in runs]
    return pd.DataFrame(rows)


def within_noise(delta_loss: float, floor: float) -> bool:
    """The one definition of "within noise": the loss increase is below the floor.

    A decrease counts too (a quantised model that happens to score better is not worse than fp32).
    The quantization table, the choice rule and the report's figure all use this.
    """
    return delta_loss < floor


def floor_value(table: pd.DataFrame) -> float:
    """The floor the verdicts use, as chosen in config."""
    return float(table["floor"].iloc[0])

"""Milestone M1's numbers and sentence: the KV cache's speed ratio and why it is what it is."""

from __future__ import annotations

import pandas as pd

from inferlab.report.numbers import fmt_number as _fmt
from inferlab.report.numbers import number as _num


def kv_ratio_by_length(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per length: the summary's speed ratio (no-cache time / cache time) with min and max.

    summary is kvbench.summarize_timings' table (the ratio repeats on both mode rows of a length).
    """
    rows = summary.dropna(subset=["speed_ratio"]).groupby("length", as_index=False).first()
    return pd.DataFrame(
        {
            "length": rows["length"].astype(int),
            "ratio": rows["speed_ratio"].astype(float),
            "ratio_min": rows["speed_ratio_min"].astype(float),
            "ratio_max": rows["speed_ratio_max"].astype(float),
        }
    )


# The columns M1 reads (kvbench.fit_table, roofline.our_roofline).
FIT_COLUMNS = ("length", "flop_estimate_ratio", "a_ms", "b_ms_per_position", "predicted_ratio",
               "fixed_share_no_cache", "a_cache_ms")
ROOFLINE_COLUMNS = ("subject", "lower_bound_ms_per_token", "measured_ms_per_token")


def kv_explanation(
    ratio_row: dict, fit: pd.DataFrame | None, profile: pd.DataFrame | None, roofline: pd.DataFrame | None
) -> tuple[str, dict]:
    """M1's sentence, assembled only from measured numbers (fit, profiler, roofline)."""
    length = int(ratio_row["length"])
    ev: dict = {}
    parts = [f"At {length} generated tokens the cache makes decoding {_fmt(ratio_row['ratio'], 2)}x faster"]
    flop = None
    if fit is not None:
        row = fit[fit["length"] == length].iloc[0] if (fit["length"] == length).any() else fit.iloc[-1]
        flop = _num(row["flop_estimate_ratio"])
        a = _num(row["a_ms"])
        b = _num(row["b_ms_per_position"])
        predicted = _num(row["predicted_ratio"])
        ev.update(
            {"flop_estimate_ratio": flop, "a_ms": a, "b_ms_per_position": b, "predicted_ratio_from_fit": predicted}
        )
        if flop is not None:
            parts[0] += f", while the FLOP estimate predicts {_fmt(flop, 1)}x"
        if a is not None and b is not None:
            share = _num(row["fixed_share_no_cache"])
            where = f"of the whole no-cache generation of {length} tokens"
            ev["fixed_share_no_cache"] = share
            text = (
                f"the no-cache step fits a + b*positions with a = {_fmt(a, 3)} ms fixed and "
                f"b = {_fmt(b, 4)} ms per position, so the fixed part is {share:.0%} {where}"
            )
            if _num(row["a_cache_ms"]) is not None:
                ev["a_cache_ms"] = _num(row["a_cache_ms"])
                text += f", while a cached step still costs a fixed {_fmt(row['a_cache_ms'], 3)} ms"
            if predicted is not None:
                text += f"; this fit predicts {_fmt(predicted, 2)}x"
            parts.append(text)
    if profile is not None and len(profile):
        row = profile.iloc[0]
        share = _num(row["op_share"])
        ev.update(
            {"profile_op_share": share, "profile_op_ms": _num(row["op_ms"]), "profile_wall_ms": _num(row["wall_ms"])}
        )
        if share is not None:
            parts.append(
                f"the profiler puts {share:.0%} of a cached step's wall time "
                f"({_fmt(ev['profile_wall_ms'], 3)} ms) inside operators and {1 - share:.0%} outside them"
            )
    if roofline is not None and len(roofline):
        ours = _our_roofline_row(roofline)
        if ours is not None:
            lb = _num(ours["lower_bound_ms_per_token"])
            measured = _num(ours["measured_ms_per_token"])
            ev.update({"roofline_lower_bound_ms_per_token": lb, "measured_ms_per_token": measured})
            if lb and measured:
                parts.append(
                    f"and the roofline lower bound is {_fmt(lb, 4)} ms/token against {_fmt(measured, 3)} ms "
                    f"measured ({measured / lb:.0f}x above the bound)"
                )
    sentence = "; ".join(parts)
    share = ev.get("fixed_share_no_cache")
    if share is not None and flop is not None:
        # the conclusion follows the numbers: which term of the fit dominates
        sentence += (
            f". So the ratio stays far below the FLOP estimate because {share:.0%} of the no-cache time is the fixed "
            "per-step cost a, which the cache does not remove; only the per-position part b shrinks."
            if share >= 0.5
            else f". The per-position cost b dominates ({1 - share:.0%} of the no-cache time), so the cache's "
            "saving shows up, but the fixed per-step cost a still holds the ratio below the FLOP estimate."
        )
    else:
        sentence += "."
    return sentence, ev


def _our_roofline_row(roofline: pd.DataFrame) -> pd.Series | None:
    """The row for our model on this machine (the anchor rows are the 27B-class model on an H100)."""
    ours = roofline[roofline["subject"] == "ours"]
    return ours.iloc[0] if len(ours) else None

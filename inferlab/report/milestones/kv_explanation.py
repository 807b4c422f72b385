"""Milestone M1's numbers and sentence: the KV cache's speed ratio and why it is what it is."""

from __future__ import annotations

import pandas as pd

from inferlab.kvcache.step_split import STEP_SPLIT_COLUMNS, STEP_SPLIT_PARTS
from inferlab.report.milestones.common import ENGINE_ORDER
from inferlab.review.numbers import fmt_number as _fmt
from inferlab.review.numbers import number as _num


def kv_ratio_by_length(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per length: the summary's speed ratio (no-cache time / cache time) with min and max.

    summary is kvbench.summarize_timings' table (the ratio repeats on both mode rows of a length);
    with an engine column, one block per engine (in the table's order, eager first).
    """
    keys = ["engine", "length"]
    rows = summary.dropna(subset=["speed_ratio"]).groupby(keys, as_index=False, sort=False).first()
    rows = rows.sort_values(keys, key=lambda c: c if c.name == "length" else c.map(_engine_rank), kind="stable")
    out = pd.DataFrame(
        {
            "length": rows["length"].astype(int),
            "ratio": rows["speed_ratio"].astype(float),
            "ratio_min": rows["speed_ratio_min"].astype(float),
            "ratio_max": rows["speed_ratio_max"].astype(float),
        }
    )
    out.insert(0, "engine", rows["engine"].astype(str))
    return out.reset_index(drop=True)


def _engine_rank(engine: str) -> int:
    return ENGINE_ORDER.index(engine) if engine in ENGINE_ORDER else len(ENGINE_ORDER)


def cached_ms_per_token(summary: pd.DataFrame, length: int) -> float | None:
    """The cached mode's median ms/token at `length` (one engine's block of the summary)."""
    rows = summary[(summary["mode"] == "cache") & (summary["length"] == length)]
    return _num(rows["ms_per_token_median"].iloc[0]) if len(rows) else None


# The compiled engine's target: its cached step within this many times the roofline bound.
COMPILED_BOUND_TARGET = 4.0


def engine_comparison(per_engine: dict[str, dict]) -> str:
    """How the cache's benefit changes once the per-step overhead is gone: compiled against eager.

    per_engine maps engine -> evidence (ratio, length, cached_ms_per_token, a_ms, b_ms_per_position).
    """
    if "eager" not in per_engine or len(per_engine) < 2:
        return ""
    base = per_engine["eager"]
    parts = []
    for engine, ev in per_engine.items():
        if engine == "eager":
            continue
        text = (f"{engine} against eager: cached decode {_fmt(ev.get('cached_ms_per_token'), 3)} vs "
                f"{_fmt(base.get('cached_ms_per_token'), 3)} ms/token, cache ratio at {ev['length']} tokens "
                f"{_fmt(ev['ratio'], 2)}x vs {_fmt(base['ratio'], 2)}x, fit a = {_fmt(ev.get('a_ms'), 3)} vs "
                f"{_fmt(base.get('a_ms'), 3)} ms and b = {_fmt(ev.get('b_ms_per_position'), 4)} vs "
                f"{_fmt(base.get('b_ms_per_position'), 4)} ms/position")
        bound, measured = _num(ev.get("roofline_lower_bound_ms_per_token")), _num(ev.get("measured_ms_per_token"))
        if bound and measured:
            met = "met" if measured / bound <= COMPILED_BOUND_TARGET else "not met"
            text += (f"; its cached step is {measured / bound:.1f}x the roofline bound ({_fmt(bound, 4)} ms): "
                     f"the engine's target of at most {COMPILED_BOUND_TARGET:.0f}x is {met}")
        split = ev.get("step_split")
        if split and split["split_step_ms"]:
            share = {part: split[part] / split["split_step_ms"] for part in STEP_SPLIT_PARTS}
            text += (f"; profiled with an event per kernel ({_fmt(split['split_step_ms'], 3)} ms a step there, the "
                     f"profiler's own cost included), a step spends {share['kernel_ms']:.0%} of its time in its "
                     f"{split['kernel_events']:.0f} kernels and library calls, {share['graph_code_ms']:.0%} in the "
                     f"package's code between them and {share['entry_ms']:.0%} in our Python around the call")
        kernels = ev.get("decode_step_kernels")
        if kernels:
            text += (f", {kernels['kernel_launches']} kernels per step, {kernels['cpp_gemm_template']} of them "
                     f"the C++ GEMM template over frozen weights, {kernels['aten_calls']} left to ATen")
        a, a0 = _num(ev.get("a_ms")), _num(base.get("a_ms"))
        if a is not None and a0 is not None:
            overhead = "smaller" if a < a0 else "not smaller"
            change = "grows" if ev["ratio"] > base["ratio"] else "shrinks"
            text += (f"; with the fixed per-step cost {overhead}, the cache's benefit {change} "
                     f"({_fmt(ev['ratio'] / base['ratio'], 2)}x the eager ratio)")
        parts.append(text)
    return " " + "; ".join(p[0].upper() + p[1:] for p in parts) + "."


# The columns M1 reads (kvbench.fit_table, roofline.our_roofline, and the profile's step split).
FIT_COLUMNS = ("length", "flop_estimate_ratio", "a_ms", "b_ms_per_position", "predicted_ratio",
               "fixed_share_no_cache", "a_cache_ms")
ROOFLINE_COLUMNS = ("subject", "lower_bound_ms_per_token", "measured_over_bound")


def kv_explanation(
    ratio_row: dict, fit: pd.DataFrame | None, profile: pd.DataFrame | None, roofline: pd.DataFrame | None,
    measured_ms_per_token: float | None = None,
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
        split = {column: _num(row.get(column)) for column in STEP_SPLIT_COLUMNS}
        if all(value is not None for value in split.values()):
            ev["step_split"] = split
    if roofline is not None and len(roofline):
        ours = _our_roofline_row(roofline)
        if ours is not None:
            lb = _num(ours["lower_bound_ms_per_token"])
            measured = measured_ms_per_token  # the summary's number (the roofline stores only the ratio)
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


def roofline_for(roofline: pd.DataFrame | None, engine: str) -> pd.DataFrame | None:
    """The anchor rows and our measured row of one engine (anchor rows carry no engine)."""
    if roofline is None:
        return None
    keep = (roofline["subject"] != "ours") | (roofline["engine"] == engine)
    return roofline[keep].reset_index(drop=True)

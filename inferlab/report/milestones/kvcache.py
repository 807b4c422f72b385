"""M1, why decoding is slow: the KV cache's speed ratio, same output, and the explanation per engine."""

from __future__ import annotations

import pandas as pd

from inferlab.report.inputs import ReportInputs
from inferlab.report.milestones.common import (
    FAIL,
    PASS,
    Milestone,
    bool_all,
    caveats,
    engine_label,
    engine_rows,
    engines_in,
    missing_milestone,
)
from inferlab.report.milestones.kv_explanation import (
    FIT_COLUMNS,
    ROOFLINE_COLUMNS,
    cached_ms_per_token,
    engine_comparison,
    kv_explanation,
    kv_ratio_by_length,
    roofline_for,
)
from inferlab.report.stamp_reader import stamps_for
from inferlab.review.numbers import number as _num


def decode_step_kernels(provenance: dict, engine: str) -> dict | None:
    """The target's 1-token step as the engine stamped it (engines.<engine>.kernels), if compiled."""
    kernels = (provenance.get("engines") or {}).get(engine, {}).get("kernels") or {}
    steps = [counts for label, counts in kernels.items() if ":T1:B1" in label]
    return steps[0] if steps else None


def _m1_engine(data: ReportInputs, engine: str, roofline: pd.DataFrame | None) -> tuple[str, dict]:
    """One engine's M1 sentence and evidence: ratio at the longest length, fit, profiler, roofline."""
    summary = engine_rows(data.table("kv_summary"), engine)
    ratios = kv_ratio_by_length(summary)
    longest = ratios.loc[ratios["length"].idxmax()].to_dict()
    measured = cached_ms_per_token(summary, int(longest["length"]))
    sentence, ev = kv_explanation(
        longest,
        engine_rows(data.table("kv_fit"), engine),
        engine_rows(data.table("kv_profile"), engine),
        roofline_for(roofline, engine),
        measured,
    )
    return sentence, {
        # engine_comparison's sentence names them (the compiled engine's stamp; None on eager)
        "decode_step_kernels": decode_step_kernels(data.provenance.get("kv_profile", {}), engine),
        "length": int(longest["length"]),
        "ratio": float(longest["ratio"]),
        "ratio_min": _num(longest.get("ratio_min")),
        "ratio_max": _num(longest.get("ratio_max")),
        "cached_ms_per_token": measured,
        **ev,
    }


def check_m1(data: ReportInputs, machine_fallback: dict | None = None) -> Milestone:
    """Pass/fail on the eager (seed-faithful) engine; same_output must hold on every engine."""
    title = "M1 KV cache: speed ratio at the longest length, same output, explanation"
    reps = data.config.get("kvcache", {}).get("reps")
    stamps = stamps_for(
        data,
        "kv_summary" if data.has("kv_summary") else "kv_timings",
        f"{reps} reps, median" if reps else "n/a",
        "no KV cache (every step recomputes the whole prefix), same prompt, greedy, batch 1",
        machine_fallback,
    )
    absent = missing_milestone(data, "M1", title, stamps)
    if absent is not None:
        return absent
    data.require("kv_summary", "length", "speed_ratio", "speed_ratio_min", "speed_ratio_max")
    timings = data.require("kv_timings", "same_output", "kv_bytes_per_token")
    data.require("kv_fit", *FIT_COLUMNS)
    data.require("kv_profile", "op_share", "op_ms", "wall_ms")
    roofline = data.require("roofline", *ROOFLINE_COLUMNS) if data.has("roofline") else None
    engines = engines_in(data.table("kv_summary"))
    per_engine, sentences = {}, {}
    for engine in engines:
        sentences[engine], per_engine[engine] = _m1_engine(data, engine, roofline)
    primary = engines[0]  # eager when present: the seed-faithful engine the criteria are stated on
    same = timings["same_output"]
    same_all = bool_all(same)
    # The milestone is stated at the seed's longest length; a config with shorter lengths gets a note.
    target_len = int(data.seed_reference.get("kvcache", {}).get("max_length", 256))
    evidence = {
        **per_engine[primary],
        "engine": engine_label(data.table("kv_summary"), primary),
        "same_output_true": int(same.astype(bool).sum()),
        "same_output_rows": int(len(same)),
        "milestone_length": target_len,
        "kv_bytes_per_token": _num(timings["kv_bytes_per_token"].iloc[0]),
    }
    if len(engines) > 1:
        evidence["engines"] = {str(e): ev for e, ev in per_engine.items()}
    problems = []
    if not same_all:
        bad = len(same) - int(same.astype(bool).sum())
        where = " (" + ", ".join(
            f"{e}: {int((~g.astype(bool)).sum())}" for e, g in timings.groupby("engine", sort=False)["same_output"]
        ) + ")"
        problems.append(f"same_output is false in {bad} of {len(same)} rows{where}")
    if evidence.get("flop_estimate_ratio") is None or evidence.get("a_ms") is None:
        problems.append("the explanation lacks the FLOP estimate or the fit")
    longest_len = evidence["length"]
    note = "" if longest_len >= target_len else (
        f" (the longest length in this config is {longest_len}, not the seed's {target_len})")
    prefix = f"[{evidence['engine']}] " if len(engines) > 1 else ""
    verdict = prefix + sentences[primary] + note
    verdict += engine_comparison({str(e): ev for e, ev in per_engine.items()}) if len(engines) > 1 else ""
    verdict += caveats(data, stamps, "kv_timings", "kv_summary", "kv_fit", "kv_steps", "kv_profile")
    verdict += (" Failed: " + "; ".join(problems) + "." if problems
                else f" Outputs token-identical in all {len(same)} runs" + (" on every engine." if len(engines) > 1
                                                                           else "."))
    seed_kv = data.seed_reference.get("kvcache", {})
    headline = f"KV cache {evidence['ratio']:.2f}x faster at {longest_len} tokens"
    if len(engines) > 1:
        headline += " on eager, " + ", ".join(
            f"{per_engine[e]['ratio']:.2f}x {e}" for e in engines[1:]) if primary == "eager" else ""
    headline += f" (seed page: {seed_kv.get('cpu_ratio_at_256')}x on their CPU at 256)"
    if stamps.get("contended"):
        headline += "; timings contended"
    return Milestone("M1", title, FAIL if problems else PASS, verdict, evidence, stamps, [], problems,
                     headline + ".")

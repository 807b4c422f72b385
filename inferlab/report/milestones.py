"""The seed's four acceptance milestones, checked on the measured tables.

Each check returns a Milestone with status "pass", "fail" or "missing", the evidence numbers it
used, a verdict sentence built from those numbers, and the four stamps (model, machine, repeat
count, baseline). An unmet milestone is a "fail" that shows its numbers; nothing is adjusted
to make it pass. A milestone whose tables were not produced is "missing".
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from inferlab.report.inputs import ReportInputError, ReportInputs
from inferlab.report.kv_explanation import FIT_COLUMNS, ROOFLINE_COLUMNS, kv_explanation, kv_ratio_by_length
from inferlab.report.numbers import fmt_number as _fmt
from inferlab.report.numbers import number as _num
from inferlab.report.stamps import stamps_for
from inferlab.sampling_grid import GREEDY_CELL, sampling_cells

PASS, FAIL, MISSING = "pass", "fail", "missing"


@dataclass
class Milestone:
    id: str
    title: str
    status: str
    verdict: str
    evidence: dict = field(default_factory=dict)
    stamps: dict = field(default_factory=dict)
    missing_inputs: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # why a "fail" failed


# ------------------------------------------------------------------------------------- helpers


def _bool_all(series: pd.Series) -> bool:
    return bool(series.astype(bool).all())


# ----------------------------------------------------------------------------------------- M1


def check_m1(data: ReportInputs, machine_fallback: dict | None = None) -> Milestone:
    title = "M1 KV cache: speed ratio at the longest length, same output, explanation"
    reps = data.config.get("kvcache", {}).get("reps")
    stamps = stamps_for(
        data,
        "kv_summary" if data.has("kv_summary") else "kv_timings",
        f"{reps} reps, median" if reps else "n/a",
        "no KV cache (every step recomputes the whole prefix), same prompt, greedy, batch 1",
        machine_fallback,
    )
    need = ("kv_timings", "kv_summary", "kv_fit", "kv_profile")
    missing = data.missing(*need)
    if missing:
        return Milestone(
            "M1", title, MISSING, f"Missing inputs: {', '.join(missing)}.", stamps=stamps, missing_inputs=missing
        )
    summary = data.require("kv_summary", "length", "speed_ratio", "speed_ratio_min", "speed_ratio_max")
    ratios = kv_ratio_by_length(summary)
    timings = data.require("kv_timings", "same_output", "kv_bytes_per_token")
    fit = data.require("kv_fit", *FIT_COLUMNS)
    profile = data.require("kv_profile", "op_share", "op_ms", "wall_ms")
    roofline = data.require("roofline", *ROOFLINE_COLUMNS) if data.has("roofline") else None
    longest = ratios.loc[ratios["length"].idxmax()].to_dict()
    same = timings["same_output"]
    same_all = _bool_all(same)
    # The milestone is stated at the seed's longest length; a config with shorter lengths gets a note.
    target_len = int(data.seed_reference.get("kvcache", {}).get("max_length", 256))
    sentence, ev = kv_explanation(longest, fit, profile, roofline)
    evidence = {
        "length": int(longest["length"]),
        "ratio": float(longest["ratio"]),
        "ratio_min": _num(longest.get("ratio_min")),
        "ratio_max": _num(longest.get("ratio_max")),
        "same_output_true": int(same.astype(bool).sum()),
        "same_output_rows": int(len(same)),
        "milestone_length": target_len,
        **ev,
    }
    evidence["kv_bytes_per_token"] = _num(timings["kv_bytes_per_token"].iloc[0])
    problems = []
    if not same_all:
        problems.append(f"same_output is false in {len(same) - int(same.astype(bool).sum())} of {len(same)} rows")
    if evidence["flop_estimate_ratio"] is None or evidence.get("a_ms") is None:
        problems.append("the explanation lacks the FLOP estimate or the fit")
    note = (
        ""
        if int(longest["length"]) >= target_len
        else (f" (the longest length in this config is {int(longest['length'])}, not the seed's {target_len})")
    )
    status = FAIL if problems else PASS
    verdict = (
        sentence
        + note
        + (
            " Failed: " + "; ".join(problems) + "."
            if problems
            else f" Outputs token-identical in all {len(same)} runs."
        )
    )
    return Milestone("M1", title, status, verdict, evidence, stamps, [], problems)


# ----------------------------------------------------------------------------------------- M2


# The columns M2 reads from repetition.choose_default's record.
DEFAULT_COLUMNS = ("cell", "rule", "rule_satisfied", "min_p_decision", "min_p_reason")


def check_m2(data: ReportInputs, machine_fallback: dict | None = None) -> Milestone:
    title = "M2 Sampling: full repetition table, a default chosen by a stated rule, min-p decision"
    rcfg = data.config.get("sampling", {}).get("repetition", {})
    repeats = (
        f"{len(rcfg.get('prompts', []))} prompts x {rcfg.get('samples')} samples x "
        f"{rcfg.get('new_tokens')} tokens per cell, bootstrap {rcfg.get('bootstrap_resamples')} resamples"
        if rcfg
        else "n/a"
    )
    stamps = stamps_for(data, "sp_repetition", repeats, "greedy decoding on the same prompts", machine_fallback)
    missing = data.missing("sp_distribution", "sp_repetition", "sp_default")
    if missing:
        return Milestone(
            "M2", title, MISSING, f"Missing inputs: {', '.join(missing)}.", stamps=stamps, missing_inputs=missing
        )
    rep = data.require("sp_repetition", "cell")
    default = data.require("sp_default", *DEFAULT_COLUMNS)
    dist = data.require("sp_distribution", "cell", "kept")
    expected = set(sampling_cells(data.config["sampling"])) if "sampling" in data.config else set()
    present = set(rep["cell"].astype(str))
    absent = sorted(expected - present)
    has_greedy = GREEDY_CELL["cell"] in present
    problems = []
    if absent:
        problems.append(f"{len(absent)} grid cells absent from the repetition table: {absent[:5]}")
    if not has_greedy:
        problems.append("no greedy row in the repetition table")
    drow = default.iloc[0] if len(default) else None
    chosen_label = str(drow["cell"]) if drow is not None else None
    rule_text = str(drow["rule"]) if drow is not None else ""
    decision = str(drow["min_p_decision"]) if drow is not None else ""
    if decision:
        decision += f" ({drow['min_p_reason']})"
    if drow is not None and not bool(drow["rule_satisfied"]):
        problems.append("no cell met the rule's in-corpus share floor, so the default is a fallback")
    if drow is None or not rule_text:
        problems.append("no default setting chosen with a stated rule")
    if not decision:
        problems.append("no min-p decision stated")
    evidence = {
        "cells_expected": len(expected),
        "cells_present": len(expected & present),
        "greedy_row": has_greedy,
        "chosen": chosen_label,
        "rule": rule_text,
        "min_p_decision": decision,
    }
    if drow is not None:
        for name in default.columns:
            value = drow[name]
            if isinstance(value, (int, float)) and not isinstance(value, bool) and _num(value) is not None:
                evidence[f"default_{name}"] = float(value)
        kept = _kept_for(dist, drow)
        if kept is not None:
            evidence["default_kept"] = kept
    status = FAIL if problems else PASS
    cited = []
    if drow is not None:
        for name, label, digits in (
            ("seq_rep_4", "seq-rep-4", 3),
            ("in_corpus_4gram_share", "in-corpus 4-gram share", 3),
            ("greedy_seq_rep_4", "greedy seq-rep-4", 3),
            ("greedy_in_corpus_4gram_share", "greedy in-corpus share", 3),
            ("in_corpus_floor", "share floor", 3),
            ("entropy_nats", "entropy (nats)", 3),
        ):
            if name in default.columns and _num(drow[name]) is not None:
                value = f"{_fmt(drow[name], digits)}"
                lo, hi = f"{name}_ci_low", f"{name}_ci_high"
                if lo in default.columns and _num(drow[lo]) is not None:
                    value += f" [{_fmt(drow[lo], digits)}, {_fmt(drow[hi], digits)}]"
                cited.append(f"{label} {value}")
    verdict = (
        (
            f"Default: {chosen_label}"
            + (f" ({'; '.join(cited)})" if cited else "")
            + f". Rule: {rule_text}"
            + ("" if rule_text.endswith(".") else ".")
            + (f" Kept tokens at the prompt: {evidence['default_kept']}." if "default_kept" in evidence else "")
            + f" Min-p: {decision}"
            + ("" if decision.endswith(".") else ".")
        )
        if drow is not None
        else ""
    )
    if problems:
        verdict = (verdict + " " if verdict else "") + "Failed: " + "; ".join(problems) + "."
    return Milestone("M2", title, status, verdict, evidence, stamps, [], problems)


def _kept_for(dist: pd.DataFrame, row: pd.Series) -> int | None:
    """The kept-token count of the distribution table's cell that is the chosen default."""
    match = dist[dist["cell"] == row["cell"]]
    return int(match["kept"].iloc[0]) if len(match) else None


# ----------------------------------------------------------------------------------------- M3


# Milestone evidence key -> column of speculative_bench.summarise.
SPEC_EVIDENCE = {
    "alpha": "alpha",
    "measured_yield": "tokens_per_target_forward",
    "formula_E": "formula_tokens_per_target_forward",
    "rel_error": "formula_rel_error",
    "speedup_params": "speedup_theory_params",
    "speedup_time": "speedup_theory_time",
    "wall_speedup": "wall_speedup",
    "wall_speedup_min": "wall_speedup_min",
    "wall_speedup_max": "wall_speedup_max",
}


def check_m3(data: ReportInputs, machine_fallback: dict | None = None) -> Milestone:
    title = "M3 Speculative: chosen draft and k with reason, greedy identity in every case"
    scfg = data.config.get("speculative", {})
    repeats = (
        f"{len(scfg.get('prompts', []))} prompts x {len(scfg.get('seeds', []))} seeds x "
        f"{scfg.get('new_tokens')} new tokens per group"
        if scfg
        else "n/a"
    )
    stamps = stamps_for(
        data, "spec_summary", repeats, "plain target sampling (target alone), same prompts and seeds", machine_fallback
    )
    missing = data.missing("spec_summary", "spec_identity")
    if missing:
        return Milestone(
            "M3", title, MISSING, f"Missing inputs: {', '.join(missing)}.", stamps=stamps, missing_inputs=missing
        )
    summary = data.require("spec_summary", "draft", "k", *SPEC_EVIDENCE.values())
    ident = data.require("spec_identity", "identical")
    best = data.require("spec_best", "criterion", "draft", "k", "reason")
    chosen = best[best["criterion"] == "chosen"]
    if chosen.empty:
        raise ReportInputError(f"{data.paths.get('spec_best', 'spec_best')} has no row with criterion 'chosen'")
    row = chosen.iloc[0]
    # the choice row, enriched with the summary's numbers for that group
    match = summary[(summary["draft"] == row["draft"]) & (summary["k"] == row["k"])]
    if len(match):
        row = pd.concat([match.iloc[0], row[~row.index.isin(match.columns)]])
    identical = ident["identical"]
    n_ok, n_all = int(identical.astype(bool).sum()), int(len(identical))
    ev = {"draft": str(row["draft"]), "k": int(row["k"]), "greedy_identical": n_ok, "greedy_cases": n_all}
    for key, column in SPEC_EVIDENCE.items():
        if column in row.index and _num(row[column]) is not None:
            ev[key] = float(row[column])
    reason = str(row["reason"])  # speculative_bench.best_groups' own sentence
    ev["reason"] = reason
    problems = []
    if n_ok != n_all or n_all == 0:
        problems.append(f"greedy speculative output differs from target greedy in {n_all - n_ok} of {n_all} cases")
    verdict = f"Chosen: draft {ev['draft']}, k = {ev['k']}; {reason}. Greedy identity {n_ok}/{n_all}."
    if problems:
        verdict += " Failed: " + "; ".join(problems) + "."
    return Milestone("M3", title, FAIL if problems else PASS, verdict, ev, stamps, [], problems)


# ----------------------------------------------------------------------------------------- M4


def check_m4(data: ReportInputs, machine_fallback: dict | None = None) -> Milestone:
    title = "M4 Quantization: a bit width and method with loss increase below the noise floor"
    stamps = stamps_for(
        data,
        "quant_summary",
        "one pass over the full validation split per scheme",
        "fp32 weights of the same checkpoint",
        machine_fallback,
    )
    missing = data.missing("quant_summary", "noise_floor")
    if missing:
        return Milestone(
            "M4", title, MISSING, f"Missing inputs: {', '.join(missing)}.", stamps=stamps, missing_inputs=missing
        )
    summary = data.require("quant_summary", "scheme", "delta_loss")
    nf = data.require("noise_floor", "floor", "floor_source")
    choice = data.require("quant_choice", "scheme", "delta_loss", "reason", "measured")
    if choice.empty:
        raise ReportInputError(f"{data.paths.get('quant_choice', 'quant_choice')} has no row")
    floor = float(nf["floor"].iloc[0])
    stamps["repeats"] += f"; noise floor from {len(nf)} training runs ({nf['floor_source'].iloc[0]})"
    # The choice is quant_bench.choose_scheme's; scheme "none" (delta NaN) says no scheme qualifies.
    row = choice.iloc[0]
    choice_reason = None
    if _num(row["delta_loss"]) is None or str(row["scheme"]) == "none":
        choice_reason = row["reason"]
        row = None
    else:
        match = summary[summary["scheme"] == row["scheme"]]
        if len(match):
            row = pd.concat([match.iloc[0], row[~row.index.isin(match.columns)]])
    what = str(choice.iloc[0]["measured"])  # the quantization job's own statement
    ev = {"noise_floor": floor, "schemes": int(len(summary)), "measured": what}
    problems = []
    if row is None:
        best = summary.loc[summary["delta_loss"].astype(float).idxmin()]
        ev.update({"best_scheme": str(best["scheme"]), "best_delta_loss": float(best["delta_loss"])})
        problems.append(
            f"no scheme's loss increase is below the noise floor {floor:.4f} "
            f"(smallest: {best['scheme']} {float(best['delta_loss']):+.4f})"
        )
        verdict = "No scheme chosen" + (f": {choice_reason}" if choice_reason else "") + "."
    else:
        delta = float(row["delta_loss"])
        ev.update({"scheme": str(row["scheme"]), "delta_loss": delta})
        for name in (
            "bits",
            "method",
            "effective_bits_per_weight",
            "kl_mean_nats",
            "top1_agreement",
            "loss",
            "speed_status",
            "speedup_vs_fp32",
        ):
            if name in row.index:
                ev[name] = row[name] if isinstance(row[name], str) else _num(row[name])
        if not delta < floor:
            problems.append(f"chosen scheme's loss increase {delta:+.4f} is not below the floor {floor:.4f}")
        bits_eff = ev.get("effective_bits_per_weight")
        verdict = (
            f"Chosen: {row['scheme']} (delta loss {delta:+.4f} against noise floor {floor:.4f}"
            + (f", {_fmt(bits_eff, 2)} effective bits per weight" if bits_eff else "")
            + ")"
            + f"; {row['reason']}"
            + "."
        )
    verdict += f" Measured: {what}."
    if problems:
        verdict += " Failed: " + "; ".join(problems) + "."
    return Milestone("M4", title, FAIL if problems else PASS, verdict, ev, stamps, [], problems)


# ------------------------------------------------------------------------------------- all


def check_all(data: ReportInputs, machine_fallback: dict | None = None) -> list[Milestone]:
    return [check(data, machine_fallback) for check in (check_m1, check_m2, check_m3, check_m4)]

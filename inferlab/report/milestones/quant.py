"""M4, what weight quantization costs: each scheme's loss change against the noise floor, and the choice."""

from __future__ import annotations

import pandas as pd

from inferlab.report.inputs import ReportInputError, ReportInputs
from inferlab.report.milestones.common import FAIL, PASS, Milestone, missing_milestone
from inferlab.report.stamp_reader import stamps_for
from inferlab.review.numbers import fmt_number as _fmt
from inferlab.review.numbers import number as _num


def check_m4(data: ReportInputs, machine_fallback: dict | None = None) -> Milestone:
    title = "M4 Quantization: a bit width and method with loss increase below the noise floor"
    stamps = stamps_for(
        data,
        "quant_summary",
        "one pass over the full validation split per scheme",
        "fp32 weights of the same checkpoint",
        machine_fallback,
    )
    absent = missing_milestone(data, "M4", title, stamps)
    if absent is not None:
        return absent
    summary = data.require("quant_summary", "scheme", "delta_loss", "within_noise")
    nf = data.require("noise_floor", "floor", "floor_source")
    choice = data.require("quant_choice", "scheme", "within_noise", "delta_loss", "reason", "measured",
                          "smallest_delta_scheme", "smallest_delta_loss")
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
        smallest = choice.iloc[0]
        ev.update({"best_scheme": str(smallest["smallest_delta_scheme"]),
                   "best_delta_loss": float(smallest["smallest_delta_loss"])})
        problems.append(
            f"no scheme's loss increase is below the noise floor {floor:.4f} "
            f"(smallest: {ev['best_scheme']} {ev['best_delta_loss']:+.4f})"
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
        if not bool(row["within_noise"]):
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
    reliable = bool(nf["floor_reliable"].iloc[0]) if "floor_reliable" in nf.columns else True
    ev["floor_reliable"] = reliable
    if not reliable:
        note = str(nf["floor_reliability_note"].iloc[0]) if "floor_reliability_note" in nf.columns else ""
        verdict += f" The noise floor is unreliable: {note or 'too few runs'}; read 'below the floor' with care."
    if problems:
        verdict += " Failed: " + "; ".join(problems) + "."
    return Milestone("M4", title, FAIL if problems else PASS, verdict, ev, stamps, [], problems,
                     _m4_headline(ev, floor, reliable, data.seed_reference))


def _m4_headline(ev: dict, floor: float, reliable: bool, seed: dict) -> str:
    sq, snf = seed.get("quantization", {}), seed.get("noise_floor", {})
    theirs = (f"(seed page: INT4 GPTQ +{sq.get('int4_gptq_delta')}, INT4 per-tensor "
              f"+{sq.get('int4_per_tensor_sym_delta')} against their floor {snf.get('floor')})")
    ours = f"noise floor {floor:.4f}" + ("" if reliable else ", unreliable")
    if "scheme" in ev:
        return f"Quantization: {ev['scheme']} loses {ev['delta_loss']:+.4f} in validation loss, {ours} {theirs}."
    return (f"Quantization: no scheme within the {ours}; smallest increase {ev.get('best_scheme')} "
            f"{ev.get('best_delta_loss', float('nan')):+.4f} {theirs}.")

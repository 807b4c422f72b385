"""Experiment 4's section: each scheme's loss change against the noise floor, and the choice."""

from __future__ import annotations

from inferlab.report import figures as F
from inferlab.report.inputs import ReportInputs
from inferlab.report.milestones.common import Milestone
from inferlab.report.render import Document
from inferlab.report.sections.common import missing_note, select_columns


def section_quant(doc: Document, data: ReportInputs, m: Milestone, seed: dict) -> None:
    doc.add("h2", "Experiment 4: weight quantization")
    nf = data.table("noise_floor")
    floor = float(nf["floor"].iloc[0]) if nf is not None else None
    doc.add("h3", "Prediction")
    doc.add(
        "p",
        "A scheme is indistinguishable from fp32 when its validation-loss increase is below the noise floor "
        + (f"({floor:.4f}, from our reruns). " if floor is not None else "(missing). ")
        + "Finer scales (per channel, small groups) and GPTQ should lose less at 4 and 3 bits.",
    )
    if missing_note(doc, data, "quant_summary"):
        doc.add("milestone", m)
        return
    q = data.table("quant_summary").copy()
    sq = seed.get("quantization", {})
    theirs = {"int4_per_tensor_sym": sq.get("int4_per_tensor_sym_delta"), "int4_gptq": sq.get("int4_gptq_delta")}
    scheme = "scheme"
    q["delta, seed page (theirs)"] = [theirs.get(str(s)) for s in q[scheme]]
    doc.add("h3", "Measured")
    cols = [
        scheme,
        "bits",
        "method",
        "granularity",
        "loss",
        "fp32_loss",
        "delta_loss",
        "kl_mean_nats",
        "top1_agreement",
        "effective_bits_per_weight",
        "noise_floor",
        "within_noise",
        "speed_status",
        "ms_per_token",
        "speedup_vs_fp32",
        "delta, seed page (theirs)",
    ]
    doc.add("table", select_columns(q, cols), "Per scheme on the full validation split (tied embedding stays fp32)")
    choice = data.table("quant_choice")
    if choice is not None and len(choice):
        doc.add("table", choice.T.reset_index().set_axis(["field", "value"], axis=1), "The choice rule and its result")
    doc.add(
        "note",
        f"Seed page (their model): {sq.get('within_floor')} within their floor "
        f"{seed.get('noise_floor', {}).get('floor'):.3f}; INT4 per-tensor "
        f"+{sq.get('int4_per_tensor_sym_delta')}, INT4 GPTQ +{sq.get('int4_gptq_delta')}; {sq.get('int3')}; "
        f"{sq.get('measured')}.",
    )
    if nf is not None and "floor_reliable" in nf.columns and not bool(nf["floor_reliable"].iloc[0]):
        doc.add("note", f"Unreliable noise floor: {nf['floor_reliability_note'].iloc[0]}; a scheme 'within noise' "
                "may only be within an underestimated floor.")
    doc.add("figure", "quant_delta", F.FIGURES["quant_delta"])
    doc.add("h3", "Verdict")
    doc.add("milestone", m)

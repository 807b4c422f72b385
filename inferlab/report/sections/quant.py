"""Experiment 4's section: each scheme's loss change against the noise floor, and the choice."""

from __future__ import annotations

import pandas as pd

from inferlab.report import figures as F
from inferlab.report.display import SEED_DELTA_LOSS
from inferlab.report.inputs import ReportInputs
from inferlab.report.milestones.common import Milestone
from inferlab.report.render import Document
from inferlab.report.sections.common import (
    cell,
    compact,
    experiment,
    findings,
    missing_note,
    verdict,
    without_empty_theirs,
)

SEED_DELTA = SEED_DELTA_LOSS
COLUMNS = ["scheme", "bits", "delta_loss", SEED_DELTA, "kl_mean_nats", "top1_agreement", "within_noise"]


def scheme_table(summary: pd.DataFrame, seed: dict) -> pd.DataFrame:
    """Every scheme, smallest loss increase first, with the seed page's Δ on its own schemes."""
    sq = seed.get("quantization", {})
    theirs = {"int4_per_tensor_sym": sq.get("int4_per_tensor_sym_delta"), "int4_gptq": sq.get("int4_gptq_delta")}
    table = summary.assign(**{SEED_DELTA: [theirs.get(str(s)) for s in summary["scheme"]]})
    table = table.sort_values("delta_loss", kind="stable")
    return compact(table[[c for c in COLUMNS if c in table.columns]]).reset_index(drop=True)


def shown_rows(table: pd.DataFrame, chosen: str) -> pd.DataFrame:
    """Per bit width the smallest and largest increase, the chosen scheme and the seed page's schemes."""
    picks = {chosen, *table[table[SEED_DELTA].notna()]["scheme"]}
    for _, rows in table.groupby("bits"):
        picks |= {rows["scheme"].iloc[0], rows["scheme"].iloc[-1]}
    return table[table["scheme"].isin(picks)]


def quant_findings(table: pd.DataFrame, choice: pd.Series | None, floor_text: str) -> list[str]:
    first, last = table.head(1), table.tail(1)
    sentences = [f"The smallest loss increase is {first['scheme'].iloc[0]} at {cell(first, None, 'delta_loss')} "
                 f"nats, the largest {last['scheme'].iloc[0]} at {cell(last, None, 'delta_loss')} nats."]
    within = table[table["within_noise"].astype(bool)]
    if len(within):
        fewest = within.sort_values("bits", kind="stable").head(1)
        sentences.append(f"The fewest bits within the noise floor{floor_text}: {fewest['scheme'].iloc[0]} at "
                         f"{cell(fewest, None, 'bits')} bits, Δ loss {cell(fewest, None, 'delta_loss')} nats; "
                         + (f"the rule chose {choice['scheme']}." if choice is not None else "no choice was made."))
    else:
        sentences.append(f"No scheme stays within the noise floor{floor_text}: the weights stay fp32.")
    theirs = table[table[SEED_DELTA].notna()]
    if len(theirs):
        sentences.append("Beside the seed page: " + "; ".join(
            f"{r.scheme} {cell(theirs, theirs['scheme'] == r.scheme, 'delta_loss')} nats here, "
            f"{cell(theirs, theirs['scheme'] == r.scheme, SEED_DELTA)} theirs" for r in theirs.itertuples()) + ".")
    return sentences


def section_quant(doc: Document, data: ReportInputs, m: Milestone, seed: dict) -> None:
    nf = data.table("noise_floor")
    floor = float(nf["floor"].iloc[0]) if nf is not None else None
    floor_text = f" ({floor:.4f} nats, from our reruns)" if floor is not None else ""
    experiment(doc, "Experiment 4: weight quantization",
               "To how few bits can the weights go before the validation loss rises above the noise floor?",
               f"A scheme is indistinguishable from fp32 when its validation-loss increase is below the noise floor"
               f"{floor_text or ' (missing)'}. Finer scales (per channel, small groups) and GPTQ should lose less "
               "at 4 and 3 bits.")
    if missing_note(doc, data, "quant_summary"):
        verdict(doc, m)
        return
    choice_table = data.table("quant_choice")
    choice = choice_table.iloc[0] if choice_table is not None and len(choice_table) else None
    table = scheme_table(data.table("quant_summary"), seed)
    doc.add("figure", "quant_delta", F.FIGURES["quant_delta"])
    full = doc.full_table("quant-schemes", "Quantization: every scheme, smallest loss increase first", table)
    doc.add("table", without_empty_theirs(shown_rows(table, str(choice["scheme"]) if choice is not None else "")),
            "Per bit width the smallest and largest validation-loss increase over fp32, full validation split "
            "(the tied embedding stays fp32)", full)
    findings(doc, quant_findings(table, choice, floor_text))
    if nf is not None and "floor_reliable" in nf.columns and not bool(nf["floor_reliable"].iloc[0]):
        doc.add("note", f"Unreliable noise floor: {nf['floor_reliability_note'].iloc[0]}; a scheme 'within noise' "
                "may only be within an underestimated floor.")
    verdict(doc, m)

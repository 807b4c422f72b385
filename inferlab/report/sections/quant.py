"""Experiment 4's section: each scheme's loss change against the noise floor, and the choice."""

from __future__ import annotations

import pandas as pd

from inferlab.experiments import FIGURES
from inferlab.quant.spec import SEED_DELTA_LOSS, SEED_SCHEMES
from inferlab.quant.spec import SPEC as QUANT
from inferlab.report.inputs import ReportInputs
from inferlab.report.milestones.common import Milestone
from inferlab.report.render import Document
from inferlab.report.sections.common import conclude, experiment, without_empty_theirs
from inferlab.review.numbers import fmt


def scheme_table(summary: pd.DataFrame, seed: dict) -> pd.DataFrame:
    """Every scheme, smallest loss increase first, with the seed page's Δ on its own schemes."""
    theirs = {scheme: seed.get("quantization", {}).get(key) for scheme, key in SEED_SCHEMES.items()}
    table = summary.assign(**{SEED_DELTA_LOSS: [theirs.get(str(s)) for s in summary["scheme"]]})
    table = table.sort_values("delta_loss", kind="stable")
    return table[[c for c in QUANT.body if c in table.columns]].reset_index(drop=True)


def shown_rows(table: pd.DataFrame, chosen: str) -> pd.DataFrame:
    """Per bit width the smallest and largest increase, the chosen scheme and the seed page's schemes."""
    picks = {chosen, *table[table[SEED_DELTA_LOSS].notna()]["scheme"]}
    for _, rows in table.groupby("bits"):
        picks |= {rows["scheme"].iloc[0], rows["scheme"].iloc[-1]}
    return table[table["scheme"].isin(picks)]


def section_quant(doc: Document, data: ReportInputs, m: Milestone, seed: dict) -> None:
    nf = data.table("noise_floor")
    floor = f" ({fmt(float(nf['floor'].iloc[0]))} nats, from our reruns)" if nf is not None else " (missing)"
    if not experiment(doc, data, m, "Experiment 4: weight quantization",
                      "To how few bits can the weights go before the validation loss rises above the noise floor?",
                      f"A scheme is indistinguishable from fp32 when its validation-loss increase is below the noise "
                      f"floor{floor}. Finer scales (per channel, small groups) and GPTQ should lose less at 4 and 3 "
                      "bits."):
        return
    choice = data.table("quant_choice")
    table = scheme_table(data.table("quant_summary"), seed)
    doc.add("figure", "quant_delta", FIGURES["quant_delta"].title)
    full = doc.full_table("quant-schemes", "Quantization: every scheme, smallest loss increase first", table)
    doc.add("table", without_empty_theirs(shown_rows(table, str(choice["scheme"].iloc[0]) if choice is not None
                                                     and len(choice) else "")),
            "Per bit width the smallest and largest validation-loss increase over fp32, full validation split "
            "(the tied embedding stays fp32)", full)
    conclude(doc, m)

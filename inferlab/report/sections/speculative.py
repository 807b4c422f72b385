"""Experiment 3's section: each (draft, k) group, formula against measurement against the wall clock."""

from __future__ import annotations

import pandas as pd

from inferlab.experiments import FIGURES
from inferlab.report.inputs import ReportInputs
from inferlab.report.milestones.common import Milestone, engines_in
from inferlab.report.render import Document
from inferlab.report.sections.common import conclude, experiment
from inferlab.spec import per_engine
from inferlab.speculative.spec import SPEC as SPECULATIVE


def group_table(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per (draft, k): acceptance, yield against the formula, the theory speedup, the wall clock per engine."""
    engines = engines_in(summary)
    first = summary[summary["engine"] == engines[0]]
    shared = [c for c in SPECULATIVE.body if c in first.columns]
    table = first[shared].sort_values(["draft", "k"]).reset_index(drop=True)
    for engine in engines:
        wall = summary[summary["engine"] == engine].set_index(["draft", "k"])["wall_speedup"]
        table[per_engine("wall clock", engine)] = [wall.get((d, k)) for d, k in zip(table["draft"], table["k"],
                                                                                   strict=True)]
    return table


PREDICTION = ("With acceptance rate α, one round of k draft tokens yields E = (1 − α^(k+1)) / (1 − α) tokens per "
              "target forward; with a draft costing c target forwards the speedup is E / (k·c + 1). The measured yield "
              "should match E, and the best k should be small when c is not tiny.")


def section_speculative(doc: Document, data: ReportInputs, m: Milestone, seed: dict) -> None:
    if not experiment(doc, data, m, "Experiment 3: speculative sampling",
                      f"Which draft model and how many drafted tokens k make speculative sampling fastest for "
                      f"{data.target}, and does the formula predict what one round yields?", PREDICTION):
        return
    summary = data.table("spec_summary")
    doc.add("figure", "speculative_yield", FIGURES["speculative_yield"].title)
    full = doc.full_table("speculative-groups", "Speculative: every (engine, draft, k) group, with each round's "
                          "accounting, each step against its bound and each group's compile time", summary)
    doc.add("table", group_table(summary), "Per (draft, k): acceptance, yield against the formula, theory speedup "
            "with c by parameters, and the wall-clock speedup per engine", full)
    conclude(doc, m)

"""Experiment 2's section: the next-token distribution and repetition per cell, against human text."""

from __future__ import annotations

import pandas as pd

from inferlab.experiments import FIGURES
from inferlab.report.inputs import ReportInputs
from inferlab.report.milestones.common import Milestone
from inferlab.report.milestones.sampling import cell_table
from inferlab.report.render import Document
from inferlab.report.sections.common import conclude, experiment, without_empty_theirs
from inferlab.sampling.grid import GREEDY, HUMAN
from inferlab.sampling.spec import EXAMPLE_COLUMNS, ROW_NAMES, SEED_KEPT

NEAREST = 4  # cells shown after the default, closest to human text first


def readable(table: pd.DataFrame) -> pd.DataFrame:
    """The table as shown: the greedy and human rows named for what they are."""
    return table.assign(cell=table["cell"].map(lambda c: ROW_NAMES.get(c, c)))


def example_texts(samples: pd.DataFrame) -> pd.DataFrame:
    """One example per cell (first 60 characters), the human reference last and labelled as such."""
    ex = samples.drop_duplicates("cell")
    ex = pd.concat([ex[ex["cell"] != HUMAN], ex[ex["cell"] == HUMAN]]).copy()
    ex["text"] = ex["text"].astype(str).str.slice(0, 60)
    ex.insert(1, "source", ["validation text (human, not model output)" if c == HUMAN else "model output"
                            for c in ex["cell"]])
    return ex[[c for c in EXAMPLE_COLUMNS if c in ex.columns]]


def shown_rows(table: pd.DataFrame, chosen: str) -> pd.DataFrame:
    """Human, greedy, the default, the next cells closest to human text, the seed page's cell, the least
    repetitive cell: the rows the findings read."""
    sampled = table[~table["cell"].isin([HUMAN, GREEDY])]
    picks = [HUMAN, GREEDY, chosen, *sampled[sampled["cell"] != chosen]["cell"].head(NEAREST)]
    picks += list(sampled[sampled[SEED_KEPT].notna()]["cell"])
    if "seq_rep_4" in sampled and len(sampled):
        picks.append(sampled.loc[sampled["seq_rep_4"].idxmin(), "cell"])
    return table[table["cell"].isin(picks)]


PREDICTION = ("Raising T flattens the distribution, so entropy and the kept count grow with T at fixed top-p (the "
              "entropy of a truncated distribution is at most ln(kept) nats). Lower repetition should come with a "
              "lower in-corpus 4-gram share: text drifting into nonsense. The default should sit nearest to "
              "held-out human text scored the same way.")


def section_sampling(doc: Document, data: ReportInputs, m: Milestone, seed: dict) -> None:
    if not experiment(doc, data, m, "Experiment 2: temperature × top-p (and min-p)",
                      "Which temperature and truncation should be our default, judged by how close the text comes "
                      "to human text?", PREDICTION):
        return
    chosen = str(data.table("sp_default").iloc[0]["cell"])
    table = cell_table(data, seed)
    doc.add("figure", "sampling_repetition", FIGURES["sampling_repetition"].title)
    full = doc.full_table("sampling-cells", "Sampling: every cell's distribution, repetition and distance to human "
                          "text", readable(table), figure="sampling_heatmaps")
    doc.add("table", without_empty_theirs(readable(shown_rows(table, chosen))),
            "Cells against held-out human text (the 'human' row: validation text scored the same way, not model "
            "output); closest to human text first", full)
    samples = data.table("sp_samples")
    if samples is not None and "text" in samples.columns:
        doc.full_table("sampling-examples", "Sampling: one example text per cell (first 60 characters), and the "
                       "held-out validation text they are measured against", example_texts(samples))
    conclude(doc, m, ("note", "Example texts per cell are in the appendix. The sampling workbench "
                      "(sampling-workbench.html) recomputes every cell's distribution in the browser from the same "
                      "logits."))

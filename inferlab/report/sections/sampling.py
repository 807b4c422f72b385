"""Experiment 2's section: the next-token distribution and repetition per cell, against human text."""

from __future__ import annotations

import pandas as pd

from inferlab.report import figures as F
from inferlab.report.display import SEED_KEPT
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
from inferlab.sampling.grid import GREEDY as GREEDY_CELL
from inferlab.sampling.grid import HUMAN as HUMAN_CELL
from inferlab.sampling.summary_table import wide_summary

COLUMNS = ["cell", "entropy_nats", "kept", SEED_KEPT, "seq_rep_4", "in_corpus_4gram_share", "distance"]
NEAREST = 4  # cells shown after the default, closest to human text first
ROW_NAMES = {GREEDY_CELL: "greedy (baseline)", HUMAN_CELL: "reference: validation text (human)"}


def readable(table: pd.DataFrame) -> pd.DataFrame:
    """The table as shown: the greedy and human rows named for what they are."""
    return table.assign(cell=table["cell"].map(lambda c: ROW_NAMES.get(c, c)))


def example_texts(samples: pd.DataFrame) -> pd.DataFrame:
    """One example per cell (first 60 characters), the human reference last and labelled as such."""
    ex = samples.drop_duplicates("cell")
    ex = pd.concat([ex[ex["cell"] != HUMAN_CELL], ex[ex["cell"] == HUMAN_CELL]]).copy()
    ex["text"] = ex["text"].astype(str).str.slice(0, 60)
    ex.insert(1, "source", ["validation text (human, not model output)" if c == HUMAN_CELL else "model output"
                            for c in ex["cell"]])
    return ex[[c for c in ("cell", "source", "prompt", "sample", "seq_rep_4", "in_corpus_4gram_share", "text")
               if c in ex.columns]]


def cell_table(data: ReportInputs, seed: dict) -> pd.DataFrame:
    """One row per cell (human and greedy first): distribution, repetition and distance to human text."""
    rep = wide_summary(data.table("sp_repetition")).reset_index()
    dist = data.table("sp_distribution")
    if dist is not None:  # outer: a cell with a distribution but no repetition run still shows
        table = rep.merge(dist[["cell", "truncation", "temperature", "top_p", "min_p", "entropy_nats", "kept"]],
                          on="cell", how="outer", suffixes=("", "_dist"))
        for col in ("truncation", "temperature", "top_p", "min_p"):
            table[col] = table[col].fillna(table.pop(f"{col}_dist"))
    else:
        table = rep
    distances = data.table("sp_distance")
    if distances is not None:
        table = table.merge(distances[["cell", "distance"]], on="cell", how="left")
    ref = seed.get("sampling", {}).get("reference_cell", {})
    their_cell = ((table["temperature"] - ref.get("temperature", -1)).abs() < 1e-9) & (
        (table["top_p"] - ref.get("top_p", -1)).abs() < 1e-9) & (table["min_p"] == 0)
    table[SEED_KEPT] = [ref.get("kept") if hit else None for hit in their_cell]
    order = table["cell"].map({HUMAN_CELL: 0, GREEDY_CELL: 1}).fillna(2)
    sort = ["_order", "distance"] if "distance" in table else ["_order"]
    table = table.assign(_order=order).sort_values(sort, kind="stable").drop(columns="_order")
    return compact(table[[c for c in COLUMNS if c in table.columns]]).reset_index(drop=True)


def shown_rows(table: pd.DataFrame, chosen: str) -> pd.DataFrame:
    """Human, greedy, the default, the next cells closest to human text, the seed page's cell, the least
    repetitive cell: the rows the findings read."""
    sampled = table[~table["cell"].isin([HUMAN_CELL, GREEDY_CELL])]
    picks = [HUMAN_CELL, GREEDY_CELL, chosen, *sampled[sampled["cell"] != chosen]["cell"].head(NEAREST)]
    picks += list(sampled[sampled[SEED_KEPT].notna()]["cell"])
    if "seq_rep_4" in sampled and len(sampled):
        picks.append(sampled.loc[sampled["seq_rep_4"].idxmin(), "cell"])
    return table[table["cell"].isin(picks)]


def sampling_findings(table: pd.DataFrame, chosen: str, default: pd.Series) -> list[str]:
    at = {name: table["cell"] == name for name in table["cell"]}
    sentences = []
    if "distance" in table:
        sampled = table[~table["cell"].isin([HUMAN_CELL, GREEDY_CELL])]
        runner = sampled[sampled["cell"] != chosen].head(1)
        versus = (f", against {cell(runner, None, 'distance')} for the next closest, {runner['cell'].iloc[0]}"
                  if len(runner) else "")
        greedy = (f", and {cell(table, at[GREEDY_CELL], 'distance')} for greedy"
                  if GREEDY_CELL in at and pd.notna(table.loc[at[GREEDY_CELL], "distance"].iloc[0]) else "")
        rank = ("the cell closest to human text" if sampled["cell"].iloc[0] == chosen
                else "the rule's pick among cells tied with the closest within noise")
        sentences.append(f"The default {chosen} is {rank}: distance "
                         f"{cell(table, at[chosen], 'distance')}{versus}{greedy}.")
    if {HUMAN_CELL, GREEDY_CELL} <= at.keys():
        least = table[~table["cell"].isin([HUMAN_CELL, GREEDY_CELL])].sort_values("seq_rep_4").head(1)
        drifts = least["in_corpus_4gram_share"].iloc[0] < table.loc[at[HUMAN_CELL], "in_corpus_4gram_share"].iloc[0]
        lead = "Less repetition is not better text" if drifts else "Less repetition here stays close to the corpus"
        sentences.append(
            f"{lead}: greedy repeats {cell(table, at[GREEDY_CELL], 'seq_rep_4')} of its "
            f"4-grams and human text {cell(table, at[HUMAN_CELL], 'seq_rep_4')}; the least repetitive cell, "
            f"{least['cell'].iloc[0]}, repeats {cell(least, None, 'seq_rep_4')}, {'but only' if drifts else 'and'} "
            f"{cell(least, None, 'in_corpus_4gram_share')} of its 4-grams occur in the corpus (human text: "
            f"{cell(table, at[HUMAN_CELL], 'in_corpus_4gram_share')}).")
    theirs = table[table[SEED_KEPT].notna()]
    if len(theirs) and "kept" in table:
        sentences.append(f"At the seed page's cell {theirs['cell'].iloc[0]} our model keeps "
                         f"{cell(theirs, None, 'kept')} tokens after the prompt (entropy "
                         f"{cell(theirs, None, 'entropy_nats')} nats); theirs kept {cell(theirs, None, SEED_KEPT)}.")
    elif "kept" in table:
        sentences.append(f"The default keeps {cell(table, at[chosen], 'kept')} tokens after the prompt (entropy "
                         f"{cell(table, at[chosen], 'entropy_nats')} nats). Min-p: {default['min_p_decision']}.")
    return sentences


PREDICTION = ("Raising T flattens the distribution, so entropy and the kept count grow with T at fixed top-p (the "
              "entropy of a truncated distribution is at most ln(kept) nats). Lower repetition should come with a "
              "lower in-corpus 4-gram share: text drifting into nonsense. The default should sit nearest to "
              "held-out human text scored the same way.")


def section_sampling(doc: Document, data: ReportInputs, m: Milestone, seed: dict) -> None:
    experiment(doc, "Experiment 2: temperature × top-p (and min-p)",
               "Which temperature and truncation should be our default, judged by how close the text comes to "
               "human text?", PREDICTION)
    if missing_note(doc, data, "sp_repetition", "sp_default"):
        verdict(doc, m)
        return
    default = data.table("sp_default").iloc[0]
    chosen = str(default["cell"])
    table = cell_table(data, seed)
    doc.add("figure", "sampling_repetition", F.FIGURES["sampling_repetition"])
    full = doc.full_table("sampling-cells", "Sampling: every cell's distribution, repetition and distance to human "
                          "text", readable(table), figure="sampling_heatmaps")
    doc.add("table", without_empty_theirs(readable(shown_rows(table, chosen))),
            "Cells against held-out human text (the 'human' row: validation text scored the same way, not model "
            "output); closest to human text first", full)
    findings(doc, sampling_findings(table, chosen, default))
    samples = data.table("sp_samples")
    if samples is not None and "text" in samples.columns:
        doc.full_table("sampling-examples", "Sampling: one example text per cell (first 60 characters), and the "
                       "held-out validation text they are measured against", example_texts(samples))
    doc.add("note", "Example texts per cell are in the appendix. The sampling workbench (sampling-workbench.html) "
            "recomputes every cell's distribution in the browser from the same logits.")
    verdict(doc, m)

"""Experiment 2's section: the distribution, the repetition table against human text, the default."""

from __future__ import annotations

import math

import pandas as pd

from inferlab.report import figures as F
from inferlab.report.inputs import ReportInputs
from inferlab.report.milestones.common import Milestone
from inferlab.report.render import Document
from inferlab.report.sections.common import missing_note, select_columns
from inferlab.sampling.summary_table import wide_summary

HUMAN_CELL = "human"  # repetition.HUMAN


ROW_KINDS = {"greedy": "greedy (baseline)", HUMAN_CELL: "reference: validation text (human)"}


def section_sampling(doc: Document, data: ReportInputs, m: Milestone, seed: dict) -> None:
    doc.add("h2", "Experiment 2: temperature x top-p (and min-p)")
    ref = seed.get("sampling", {}).get("reference_cell", {})
    doc.add("h3", "Prediction")
    doc.add(
        "p",
        "Raising T flattens the distribution, so entropy and kept count grow with T at fixed top-p; the "
        "entropy of a truncated distribution is at most ln(kept) nats. Lower repetition should come with a "
        "lower in-corpus 4-gram share (text drifting into nonsense).",
    )
    if missing_note(doc, data, "sp_distribution"):
        pass
    else:
        dist = data.table("sp_distribution").copy()
        dist["ln(kept) bound, nats"] = [math.log(k) if k > 0 else float("nan") for k in dist["kept"]]
        # Their one published cell (T and top-p of the seed page); every other row stays empty.
        is_their_cell = [
            abs(t - ref.get("temperature", -1)) < 1e-9 and abs(p - ref.get("top_p", -1)) < 1e-9 and mp == 0
            for t, p, mp in zip(dist["temperature"], dist["top_p"], dist["min_p"], strict=True)
        ]
        dist["entropy, seed page (theirs)"] = [ref.get("entropy") if hit else None for hit in is_their_cell]
        dist["kept, seed page (theirs)"] = [ref.get("kept") if hit else None for hit in is_their_cell]
        doc.add("h3", "Measured")
        doc.add(
            "table",
            select_columns(
                dist,
                [
                    "cell",
                    "truncation",
                    "temperature",
                    "top_p",
                    "min_p",
                    "entropy_nats",
                    "entropy_bits",
                    "kept",
                    "ln(kept) bound, nats",
                    "entropy, seed page (theirs)",
                    "kept, seed page (theirs)",
                ],
            ),
            "Next-token distribution after the prompt (truncated, renormalised; float64)",
        )
        doc.add(
            "note",
            f"The seed page's reference cell (T={ref.get('temperature'):g}, top-p {ref.get('top_p'):g}: entropy "
            f"{ref.get('entropy')}, {ref.get('kept')} kept) is their model's; "
            "their entropy unit is not stated. The sampling workbench (sampling-workbench.html) recomputes "
            "every row of this table in the browser.",
        )
        doc.add("figure", "sampling_heatmaps", F.FIGURES["sampling_heatmaps"])
    rep = data.table("sp_repetition")
    if rep is not None:
        w = wide_summary(rep).reset_index()
        w.insert(1, "row", [ROW_KINDS.get(str(c), "sampled") for c in w["cell"]])
        doc.add(
            "table",
            select_columns(
                w,
                [
                    "cell",
                    "row",
                    "temperature",
                    "top_p",
                    "min_p",
                    "seq_rep_4",
                    "seq_rep_4_ci_low",
                    "seq_rep_4_ci_high",
                    "distinct_1",
                    "distinct_2",
                    "in_corpus_4gram_share",
                    "in_corpus_4gram_share_ci_low",
                    "in_corpus_4gram_share_ci_high",
                    "nll_per_token",
                    "zipf_coefficient",
                ],
            ),
            "Repetition per cell: mean and bootstrap 95% CI over prompts x samples; the 'human' row is held-out "
            "validation text scored the same way, the reference the cells are measured against (not model output)",
        )
        sr = seed.get("sampling", {})
        doc.add(
            "note",
            f"Seed page (their model): repetition {sr.get('repetition_greedy'):.0%} under greedy, "
            f"{sr.get('repetition_t13'):.0%} at T=1.3 where samples read as nonsense."
            if sr.get("repetition_greedy") is not None
            else "",
        )
        doc.add("figure", "sampling_repetition", F.FIGURES["sampling_repetition"])
    else:
        missing_note(doc, data, "sp_repetition")
    distances = data.table("sp_distance")
    if distances is not None:
        terms = [c for c in distances.columns if c.startswith("term_")]
        doc.add(
            "table",
            select_columns(
                distances.sort_values("distance"),
                ["cell", "truncation", "temperature", "top_p", "min_p", "distance", "distance_ci_low",
                 "distance_ci_high", "eligible", "chosen", *terms],
            ),
            "Distance of each cell to held-out human text (sum of |cell - human| / spread over the metrics; "
            "95% bootstrap CI), closest first; greedy is scored but not eligible as a default",
        )
    samples = data.table("sp_samples")
    if samples is not None and "text" in samples.columns:
        ex = samples.drop_duplicates("cell")
        human = ex[ex["cell"] == HUMAN_CELL]
        ex = pd.concat([ex[ex["cell"] != HUMAN_CELL].head(8), human]).copy()
        ex["text"] = ex["text"].astype(str).str.slice(0, 60)
        ex.insert(1, "source", ["validation text (human, not model output)" if c == HUMAN_CELL else "model output"
                                for c in ex["cell"]])
        doc.add(
            "table",
            select_columns(ex, ["cell", "source", "prompt", "sample", "seq_rep_4", "in_corpus_4gram_share", "text"]),
            "Example texts (first 60 characters): model output per cell, and the held-out validation text "
            "(the human reference) they are measured against",
        )
    default = data.table("sp_default")
    if default is not None:
        doc.add(
            "table",
            default.T.reset_index().set_axis(["field", "value"], axis=1),
            "The default setting and the min-p decision",
        )
    doc.add("h3", "Verdict")
    doc.add("milestone", m)

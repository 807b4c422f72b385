"""Experiment 3's section: each (draft, k) group, formula against measurement against the wall clock."""

from __future__ import annotations

from inferlab.report import figures as F
from inferlab.report.inputs import ReportInputs
from inferlab.report.milestones.common import Milestone, contended
from inferlab.report.render import Document
from inferlab.report.sections.common import ENGINE_COLUMNS, missing_note, select_columns


def section_speculative(doc: Document, data: ReportInputs, m: Milestone, seed: dict) -> None:
    doc.add("h2", "Experiment 3: speculative sampling")
    doc.add("h3", "Prediction")
    doc.add(
        "p",
        "With acceptance rate alpha, one round of k draft tokens yields E = (1 - alpha^(k+1)) / (1 - alpha) "
        "tokens per target forward; with a draft costing c target forwards the speedup is E / (k c + 1). "
        "The measured yield should match E, and the best k should be small when c is not tiny.",
    )
    if missing_note(doc, data, "spec_summary"):
        doc.add("milestone", m)
        return
    s = data.table("spec_summary")
    doc.add("h3", "Measured")
    doc.add(
        "table",
        select_columns(
            s,
            [
                *ENGINE_COLUMNS,
                "draft",
                "k",
                "target_forwards",
                "proposed",
                "accepted",
                "alpha",
                "overlap_mean",
                "tokens_per_target_forward",
                "formula_tokens_per_target_forward",
                "formula_rel_error",
                "c_params",
                "c_time",
                "speedup_theory_params",
                "speedup_theory_time",
                "wall_speedup",
                "wall_speedup_min",
                "wall_speedup_max",
                "contended",
            ],
        ),
        "Per engine and group: acceptance, yield vs formula, c, theoretical and wall-clock speedup (against "
        "target-only sampling on the same engine)",
    )
    if contended(data, "spec_summary"):
        doc.add("note", "CONTENDED: other work loaded the machine while these timings ran; the wall-clock "
                "speedups are not comparable with an idle run.")
    sp = seed.get("speculative", {})
    doc.add(
        "note",
        f"Seed page (their model, their machine): formula within {sp.get('formula_max_rel_error'):.0%} "
        f"of measured; best by parameter cost: {sp.get('best_by_params', {}).get('draft')} "
        f"k={sp.get('best_by_params', {}).get('k')}; greedy identity {sp.get('greedy_identical')}; "
        f"wall clock {sp.get('wall_clock')}.",
    )
    best = data.table("spec_best")
    if best is not None and len(best):
        doc.add(
            "table",
            select_columns(
                best,
                [
                    "criterion",
                    *ENGINE_COLUMNS,
                    "overall_choice",
                    "description",
                    "draft",
                    "k",
                    "value",
                    "runner_up_draft",
                    "runner_up_k",
                    "runner_up_value",
                ],
            ),
            "Best group by each criterion, per engine (the first row, criterion 'chosen', is the one overall "
            "choice; 'chosen_for_engine' is each engine's own pick)",
        )
    ident = data.table("spec_identity")
    if ident is not None:
        col = "identical"
        agg = ident.groupby(["engine", "draft", "k"])[col].agg(identical="sum", cases="count").reset_index()
        doc.add("table", agg, "Greedy speculative output vs target greedy, cases identical per group")
    doc.add("figure", "speculative_yield", F.FIGURES["speculative_yield"])
    doc.add("h3", "Verdict")
    doc.add("milestone", m)

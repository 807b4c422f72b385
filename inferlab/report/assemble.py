"""The whole report document: the opening, one section per experiment, provenance, the appendix.

render.py defines the blocks; sections/*.py fill them; page_html.py and page_markdown.py render them.
"""

from __future__ import annotations

from inferlab.report import figures as F
from inferlab.report.inputs import ReportInputs
from inferlab.report.milestones.common import Milestone
from inferlab.report.milestones.kvcache import kv_ratio_by_length
from inferlab.report.render import Document
from inferlab.report.sections.common import appendix_of_inputs, status_table
from inferlab.report.sections.kvcache import section_kvcache
from inferlab.report.sections.provenance import section_provenance
from inferlab.report.sections.quant import section_quant
from inferlab.report.sections.sampling import section_sampling
from inferlab.report.sections.setup import section_setup
from inferlab.report.sections.speculative import section_speculative


def build_document(data: ReportInputs, milestones: list[Milestone], run: dict,
                   review: dict[str, list] | None = None) -> Document:
    """review: blocks from inferlab.report.opening, {"opening": cards and changes, "provenance": lineage};
    without it the report opens with the plain milestones table."""
    seed = data.seed_reference
    by_id = {m.id: m for m in milestones}
    doc = Document("C13 inference lab: report")
    doc.add("h1", "C13 inference lab: report")
    doc.add(
        "p",
        "Four experiments from the C13 lab page, rerun by this workflow on our models and this machine, each as the "
        "lab page tells it: the question, the prediction, one figure and one table, what to read from them, the "
        "verdict. Every conclusion carries four stamps: model, machine, repeat count and baseline. Columns marked "
        "'seed page (theirs)' are the lab page's published figures from their model on their machine, shown for "
        "comparison only; they are never pass/fail targets. Every table is complete in the appendix.",
    )
    if review is None:
        doc.add("table", status_table(milestones), "Milestones")
    else:
        doc.blocks += review["opening"]
    section_setup(doc, data, seed)
    section_kvcache(doc, data, by_id["M1"], seed)
    section_sampling(doc, data, by_id["M2"], seed)
    section_speculative(doc, data, by_id["M3"], seed)
    section_quant(doc, data, by_id["M4"], seed)
    section_provenance(doc, run, review["provenance"] if review is not None else ())
    appendix_of_inputs(doc, data)
    doc.figures = make_figures(data)
    return doc


def make_figures(data: ReportInputs) -> dict[str, bytes]:
    seed = data.seed_reference
    summ = data.table("kv_summary")
    ratios = kv_ratio_by_length(summ) if summ is not None else None
    nf = data.table("noise_floor")
    return {
        "kvcache_ratio": F.kvcache_ratio(ratios, data.table("kv_fit"), seed),
        "sampling_heatmaps": F.sampling_heatmaps(data.table("sp_distribution")),
        "sampling_repetition": F.sampling_repetition(data.table("sp_repetition"), seed, data.table("sp_default")),
        "speculative_yield": F.speculative_yield(data.table("spec_summary")),
        "quant_delta": F.quant_delta(
            data.table("quant_summary"),
            float(nf["floor"].iloc[0]) if nf is not None else None,
            seed.get("noise_floor", {}).get("floor"),
            seed.get("quantization", {}),
        ),
        "training_curves": F.training_curves(data.loss_curves),
    }

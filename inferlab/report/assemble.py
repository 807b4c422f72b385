"""The whole report document: the opening, one section per experiment, provenance, the appendix.

render.py defines the blocks; sections/*.py fill them; page_html.py and page_markdown.py render them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from inferlab import experiments
from inferlab.report.inputs import ReportInputs
from inferlab.report.milestones.common import Milestone
from inferlab.report.render import Document
from inferlab.report.sections.common import appendix_of_inputs, status_table
from inferlab.report.sections.kvcache import section_kvcache
from inferlab.report.sections.provenance import section_provenance
from inferlab.report.sections.quant import section_quant
from inferlab.report.sections.sampling import section_sampling
from inferlab.report.sections.setup import section_setup
from inferlab.report.sections.speculative import section_speculative
from inferlab.spec import Figure


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
    doc.blocks += unplaced_figures(doc)
    appendix_of_inputs(doc, data)
    doc.figures = make_figures(data)
    return doc


def _figure_stems(blocks: list[tuple]):
    """The stems of every figure block, inside folded ("details") and two-column ("pair") blocks too."""
    for block in blocks:
        if block[0] == "figure":
            yield block[1]
        elif block[0] == "details":  # ("details", summary, [blocks])
            yield from _figure_stems(block[2])
        elif block[0] == "pair":  # ("pair", [blocks], [blocks])
            yield from _figure_stems([*block[1], *block[2]])


def unplaced_figures(doc: Document) -> list[tuple]:
    """The drawn figures no section shows (a new one declared only in its spec), each under its title: every
    declared figure reaches the page, and a section places it where its story needs it."""
    shown = set(_figure_stems(doc.blocks)) | {t.figure for t in doc.appendix}
    rest = [(stem, figure) for stem, figure in experiments.FIGURES.items() if figure.draw and stem not in shown]
    return [("h2", "Further figures"), *(("figure", stem, figure.title) for stem, figure in rest)] if rest else []


def make_figures(data: ReportInputs) -> dict[str, bytes]:
    """{stem: PNG} of every figure the specs declare a drawing for (the review's changes figure comes from the diff,
    in inferlab.report.build)."""
    return {stem: drawing(figure)(data) for stem, figure in experiments.FIGURES.items() if figure.draw}


def drawing(figure: Figure) -> Callable[[ReportInputs], bytes]:
    """The function a figure names ("module:function"), imported only when the report draws: the specs, read at
    the workflow's parse time, stay free of matplotlib."""
    module, function = figure.draw.split(":")
    return getattr(importlib.import_module(module), function)

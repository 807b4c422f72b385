"""What every report section uses: the experiment's frame (question, prediction, findings, verdict),
the appendix of every input table, the missing-table note."""

from __future__ import annotations

import pandas as pd

from inferlab.experiments import MILESTONES, TABLES
from inferlab.report import narrative
from inferlab.report.inputs import ReportInputs
from inferlab.report.milestones.common import Milestone
from inferlab.report.render import Document


def status_table(milestones: list[Milestone]) -> pd.DataFrame:
    return pd.DataFrame([{"milestone": m.id, "status": m.status.upper(), "headline": m.headline,
                          "verdict": m.verdict} for m in milestones])


def without_empty_theirs(df: pd.DataFrame) -> pd.DataFrame:
    """The body table without a seed-page column that has no value on any shown row (their cell is not in our
    grid): an empty column says nothing; the full table in the appendix keeps it."""
    empty = [c for c in df.columns if "seed page" in str(c) and df[c].isna().all()]
    return df.drop(columns=empty)


def appendix_of_inputs(doc: Document, data: ReportInputs) -> None:
    """Every table the report read, complete, under its file name; the corpus statistics (JSON) last."""
    stats = data.json.get("corpus_stats")
    tables = {**data.tables, "corpus_stats": pd.DataFrame([{"quantity": k, "value": str(v)} for k, v in stats.items()])
              if stats else None}
    for key, df in tables.items():
        if df is not None:
            title = TABLES[key].title if key in TABLES else key
            doc.full_table(f"input-{key}", f"{title} ({data.paths.get(key, key)})", df)


def experiment(doc: Document, data: ReportInputs, m: Milestone, title: str, question: str, prediction: str) -> bool:
    """The lab page's frame: the question in one sentence, then the prediction made before measuring. False
    when a table its spec's body needs is absent: the section then says MISSING and gives the verdict alone."""
    doc.add("h2", title)
    doc.add("question", question)
    doc.add("prediction", prediction)
    missing = data.missing(*MILESTONES[m.id].body_needs)
    if missing:
        doc.add(
            "p", "MISSING: this section's tables were not produced in this workflow run: " + ", ".join(missing) + "."
        )
        doc.blocks += narrative.verdict_blocks(m)
    return not missing


def conclude(doc: Document, m: Milestone, *notes: tuple) -> None:
    """The three things to read straight off the table (the lab page's 三件事, from the milestone's evidence),
    any notes, then the verdict."""
    sentences = narrative.findings(m)
    if sentences:
        doc.add("findings", sentences)
    doc.blocks += [*notes, *narrative.verdict_blocks(m)]

"""What every report section uses: the experiment's frame (question, prediction, findings, verdict),
compact-table helpers, the appendix of every input table, the missing-table note."""

from __future__ import annotations

import math

import pandas as pd

from inferlab.experiments import TABLES
from inferlab.report.inputs import ReportInputs
from inferlab.report.milestones.common import Milestone
from inferlab.report.render import Document, cell_text

ENGINE_COLUMNS = ["engine", "engine_used"]  # shown first in every table with one block per engine

def status_table(milestones: list[Milestone]) -> pd.DataFrame:
    return pd.DataFrame([{"milestone": m.id, "status": m.status.upper(), "headline": m.headline,
                          "verdict": m.verdict_line} for m in milestones])


def select_columns(df: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    return df[[c for c in cols if c in df.columns]]


def sig(value, digits: int = 3):
    """A number rounded to `digits` significant digits for a compact table (ints and text as they are)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or isinstance(value, int):
        return value
    if math.isnan(value) or value == 0:
        return value
    return round(value, digits - 1 - int(math.floor(math.log10(abs(value)))))


def compact(df: pd.DataFrame, digits: int = 3) -> pd.DataFrame:
    """Every float cell to `digits` significant digits: what the body shows and its findings quote."""
    out = df.copy()
    for col in out.columns:
        if pd.api.types.is_float_dtype(out[col]):
            out[col] = [sig(float(v), digits) for v in out[col]]
    return out


def without_empty_theirs(df: pd.DataFrame) -> pd.DataFrame:
    """The body table without a seed-page column that has no value on any shown row (their cell is not in our
    grid): an empty column says nothing; the full table in the appendix keeps it."""
    empty = [c for c in df.columns if "seed page" in str(c) and df[c].isna().all()]
    return df.drop(columns=empty)


def cell(df: pd.DataFrame, mask, column: str) -> str:
    """One cell of a compact table as the reader sees it, for a finding's sentence."""
    rows = df.loc[mask, column] if mask is not None else df[column]
    return cell_text(rows.iloc[0])


def missing_note(doc: Document, data: ReportInputs, *keys: str) -> bool:
    missing = data.missing(*keys)
    if missing:
        doc.add(
            "p", "MISSING: this section's tables were not produced in this workflow run: " + ", ".join(missing) + "."
        )
    return bool(missing)


def input_slug(key: str) -> str:
    return f"input-{key}"


def _title(key: str) -> str:
    return TABLES[key].title if key in TABLES else key


def appendix_of_inputs(doc: Document, data: ReportInputs) -> None:
    """Every table the report read, complete, under its file name."""
    for key, df in data.tables.items():
        if df is not None:
            source = data.paths.get(key, key)
            doc.full_table(input_slug(key), f"{_title(key)} ({source})", df)
    stats = data.json.get("corpus_stats")
    if stats:
        doc.full_table(input_slug("corpus_stats"), f"{_title('corpus_stats')} "
                       f"({data.paths.get('corpus_stats', 'corpus_stats')})",
                       pd.DataFrame([{"quantity": k, "value": str(v)} for k, v in stats.items()]))


def experiment(doc: Document, title: str, question: str, prediction: str) -> None:
    """The lab page's frame: the question in one sentence, then the prediction made before measuring."""
    doc.add("h2", title)
    doc.add("question", question)
    doc.add("prediction", prediction)


def findings(doc: Document, sentences: list[str]) -> None:
    """The three things to read straight off the table (the lab page's 三件事), each with its numbers."""
    doc.add("findings", [s for s in sentences if s])


def verdict(doc: Document, m: Milestone) -> None:
    doc.add("h3", "Verdict")
    doc.add("milestone", m)

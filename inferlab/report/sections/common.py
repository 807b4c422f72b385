"""What every report section uses: the milestone table, column selection, the missing-table note."""

from __future__ import annotations

import pandas as pd

from inferlab.report.inputs import ReportInputs
from inferlab.report.milestones.common import Milestone
from inferlab.report.render import Document

ENGINE_COLUMNS = ["engine", "engine_used"]  # shown first in every table with one block per engine


def status_table(milestones: list[Milestone]) -> pd.DataFrame:
    return pd.DataFrame([{"milestone": m.id, "status": m.status.upper(), "headline": m.headline, "verdict": m.verdict}
                         for m in milestones])


def select_columns(df: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    return df[[c for c in cols if c in df.columns]]


def missing_note(doc: Document, data: ReportInputs, *keys: str) -> bool:
    missing = data.missing(*keys)
    if missing:
        doc.add(
            "p", "MISSING: this section's tables were not produced in this workflow run: " + ", ".join(missing) + "."
        )
    return bool(missing)


def add_table(doc: Document, df: pd.DataFrame | None, columns: list[str], caption: str) -> None:
    """The table's named columns as one block; nothing when the table was not produced."""
    if df is not None:
        doc.add("table", select_columns(df, columns), caption)

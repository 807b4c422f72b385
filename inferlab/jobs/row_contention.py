"""Which rows of a summary were measured by a contended job.

Each timing job flags its own rows (`contended`, inferlab.jobs.contention); a summary that merges several
jobs keeps that per row, so one contended job never marks the rows of the others. Apart from
contention.py, which every timing job imports, so that an edit here reruns only the summaries.
"""

from __future__ import annotations

import pandas as pd


def contended_rows(summary: pd.DataFrame, measured: pd.DataFrame, by: list[str]) -> pd.Series:
    """Per row of `summary`: whether any measured row with the same values of `by` was contended; False
    where `measured` flags nothing (an older table without the column)."""
    if "contended" not in measured.columns:
        return pd.Series(False, index=summary.index)
    flags = measured.groupby(by, as_index=False)["contended"].agg(lambda column: bool(column.fillna(False).any()))
    joined = summary[by].merge(flags, on=by, how="left")["contended"]
    return pd.Series(joined.fillna(False).astype(bool).to_numpy(), index=summary.index)

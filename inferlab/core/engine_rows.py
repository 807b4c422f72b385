"""Tables per engine: the columns that say which engine a row ran on, and per-engine summaries.

Kept apart from the engines themselves so the aggregation jobs that group rows by engine need no
torch."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:
    from inferlab.core.engine import Engine


def engine_columns(engine: Engine) -> dict:
    """The engine a table's rows ran on, as columns: the requested name and the one actually used."""
    return {"engine": engine.requested, "engine_used": engine.engine_used,
            "engine_fallback_reason": engine.engine_fallback_reason or ""}


def by_engine(function: Callable[..., pd.DataFrame], *tables: pd.DataFrame, **kwargs) -> pd.DataFrame:
    """function applied to each engine's rows of the tables, stacked with engine columns first.

    Ratios, fits and shares are therefore always within one engine, never across two."""
    engine_keys = ["engine", "engine_used", "engine_fallback_reason"]
    parts = []
    for keys, _ in tables[0].groupby(engine_keys, sort=False):
        rows = [t[t["engine"] == keys[0]].drop(columns=engine_keys, errors="ignore") for t in tables]
        part = function(*rows, **kwargs)
        for column, value in reversed(list(zip(engine_keys, keys, strict=True))):
            part.insert(0, column, value)
        parts.append(part)
    return pd.concat(parts, ignore_index=True)

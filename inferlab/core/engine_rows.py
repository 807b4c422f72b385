"""Tables per engine: the columns that say which engine a row ran on, how many of its forwards ran
eagerly, and per-engine summaries.

Kept apart from the engines themselves so the aggregation jobs that group rows by engine need no
torch."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:
    from inferlab.core.engine import Engine


def engine_columns(engine: Engine) -> dict:
    """The engine a table's rows ran on, as columns: the requested name and the one actually used. First
    the engine re-checks, by content, that no model it ran changed since its packages froze it, so that no
    row is stamped with an engine whose graphs ran other weights."""
    engine.verify_weights()
    return {"engine": engine.requested, "engine_used": engine.engine_used,
            "engine_fallback_reason": engine.engine_fallback_reason or ""}


# A timing row's count of the model forwards its own work ran eagerly (op by op, outside any compiled
# package): every forward on the eager engine; on the compiled engine the forwards that found no package
# (one the compile rules did not build). A table from before the column has none: unknown, not 0.
EAGER_CALLS = "eager_calls"


def eager_call_counter(engine: Engine) -> Callable[[], int]:
    """Counts from now on: each call returns how many forwards `engine` has run eagerly since this counter was
    made (the difference of engine.eager_calls), so a row records its own work's count, not the engine's total."""
    start = engine.eager_calls
    return lambda: engine.eager_calls - start


def sum_known(values: pd.Series) -> int | float:
    """The sum of a row group's counts; NaN (unknown) when any row lacks its count or there are no rows."""
    if values.empty or values.isna().any():
        return math.nan
    return int(values.sum())


def total_eager_calls(*tables: pd.DataFrame) -> int | float:
    """The eager calls of every row of these tables together (sum_known); NaN when any table predates the column."""
    if not tables or any(EAGER_CALLS not in table.columns for table in tables):
        return math.nan
    parts = [sum_known(table[EAGER_CALLS]) for table in tables if len(table)]
    return math.nan if not parts or any(math.isnan(p) for p in parts) else int(sum(parts))


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

"""The one place numbers are read out of table cells and formatted, for the report and the diff.

`fmt` formats a table cell (about 4 significant digits, settings as written); `fmt_number` a
number inside a sentence, to fixed digits.
"""

from __future__ import annotations

import json
import math


def number(value) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def fmt_number(value, digits: int = 3) -> str:
    value = number(value)
    return "n/a" if value is None else f"{value:.{digits}f}"


def fmt(value) -> str:
    """Numbers for tables: ints with thousands separators, floats to ~4 significant digits."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        a = abs(value)
        short = repr(value)
        if len(short) <= 6 and "e" not in short and a < 1e5:  # settings like 0.7, 1.3, 0.05 as written
            return short.removesuffix(".0") if short.endswith(".0") else short
        if a == 0:
            return "0"
        if a >= 1e6:
            return f"{value:.4g}"
        if a >= 100:
            return f"{value:,.1f}"
        if a >= 1:
            return f"{value:.3f}"
        if a >= 1e-3:
            return f"{value:.4f}"
        return f"{value:.3g}"
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)

"""The one number format of the report and the review: `fmt` writes a table cell, and a number in a
sentence with its unit; `number` reads a cell as a float (None when it holds none)."""

from __future__ import annotations

import json
import math


def number(value) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def fmt(value, unit: str = "") -> str:
    """Ints with thousands separators, floats to 4 significant digits (5 from 100 up; settings as written: 0.7,
    1.3, 0.05). With a unit, a number in a sentence: "%" a share as a whole percent, "+" a signed
    change, any other unit ("x", " ms") written after the number; "n/a" where there is no number."""
    value = value.item() if hasattr(value, "item") else value
    if unit == "%":
        share = number(value)
        return "n/a" if share is None else f"{round(100 * share)}%"
    text = _cell(value)
    if not unit:
        return text
    if not text:
        return "n/a"
    return ("+" + text if not text.startswith("-") else text) if unit == "+" else text + unit


def _cell(value) -> str:
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
            return short.removesuffix(".0")
        rounded = repr(float(f"{value:.4g}"))  # 4 significant digits, without a float's trailing noise
        if a < 100 and "e" not in rounded:
            return rounded.removesuffix(".0")
        if a >= 1e6:
            return f"{value:.4g}"
        if a >= 100:
            return f"{value:,.1f}"
        return f"{value:.3g}"
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)

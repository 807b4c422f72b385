"""Reading numbers out of table cells for the report's sentences."""

from __future__ import annotations

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

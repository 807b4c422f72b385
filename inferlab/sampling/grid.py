"""The sampling grid's cells, enumerated once (torch-free: the workflow imports it at parse time).

Cell ids: T0.7_p0.9 (temperature x top-p), T1.0_minp0.05 (min-p), and greedy, the repetition
table's baseline (temperature 0 = argmax).
"""

from __future__ import annotations

GREEDY = "greedy"
HUMAN = "human"  # the human reference row: validation-split text scored like a cell
GREEDY_CELL = {"cell": GREEDY, "truncation": "none", "temperature": 0.0, "top_p": 1.0, "min_p": 0.0}


def sampling_cells(sampling: dict) -> dict[str, dict]:
    """Cell id -> settings, in grid order: T x top-p, then the min-p cells (config `sampling`)."""
    top_p = [
        {"cell": f"T{float(t)}_p{float(p)}", "truncation": "top_p", "temperature": float(t), "top_p": float(p),
         "min_p": 0.0}
        for t in sampling["temperatures"] for p in sampling["top_ps"]
    ]
    min_p = [
        {"cell": f"T{float(t)}_minp{float(m)}", "truncation": "min_p", "temperature": float(t), "top_p": 1.0,
         "min_p": float(m)}
        for t in sampling["min_p"]["temperatures"] for m in sampling["min_p"]["values"]
    ]
    return {cell["cell"]: cell for cell in [*top_p, *min_p]}


def repetition_cells(sampling: dict) -> dict[str, dict]:
    """The cells of the repetition table: greedy first, then every sampling cell."""
    return {GREEDY_CELL["cell"]: dict(GREEDY_CELL), **sampling_cells(sampling)}

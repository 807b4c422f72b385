"""Headers of the columns the report computes for its compact tables (in no Parquet table); every
other column's display name is declared in its experiment's spec (inferlab.experiments.display_name).
"""

from __future__ import annotations

THEIRS = "seed page (theirs)"  # the marker of a column holding the seed page's published value


def theirs(label: str) -> str:
    """The seed page's value of `label` (their model, their machine), shown beside ours."""
    return f"{label}, {THEIRS}"


def per_engine(label: str, engine: str, unit: str = "×") -> str:
    """One engine's column of a quantity measured on every engine ('measured, eager (×)')."""
    return f"{label}, {engine} ({unit})"


GENERATED_TOKENS = "generated tokens"
FLOP_ESTIMATE = "FLOP estimate (×)"
SEED_CPU_RATIO = theirs("CPU") + " (×)"
SEED_KEPT = theirs("kept")
SEED_DELTA_LOSS = theirs("Δ loss")
SEED_PARAMS = theirs("params")

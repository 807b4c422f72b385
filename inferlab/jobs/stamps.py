"""The four stamps every result table carries: model, machine, repeats, baseline.

One helper for every job script, so the report reads one name for each (`repeats`, never
`reps` or `repeat_count`). A job that *measures* stamps its own machine; a job that only
aggregates measured tables carries the measuring job's stamp forward, so under a cluster
executor the stamp names the node where the numbers were taken, not where they were merged.
"""

from __future__ import annotations

STAMP_KEYS = ("model", "machine", "repeats", "baseline")


def job_stamps(machine: dict | None, model: dict | None, repeats, baseline, **extra) -> dict:
    """The provenance of a measuring job: the four stamps plus job-specific extras."""
    return {"model": model, "machine": machine, "repeats": repeats, "baseline": baseline, **extra}


def carried_stamps(measured: dict, **overrides) -> dict:
    """The provenance of an aggregating job: the measuring job's stamps, then the overrides.

    measured is the provenance read from the measuring job's table; it must carry all four stamps.
    """
    absent = [key for key in STAMP_KEYS if key not in measured]
    if absent:
        raise ValueError(f"the measured table's provenance lacks the stamps {absent}")
    return {**measured, **overrides}

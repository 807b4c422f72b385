"""The tidy run metrics table (results/metrics.parquet): every headline number with its own noise.

One row per (experiment, metric, key). Each row carries the number's uncertainty as the
experiment measured it, so a diff between two runs can tell a real change from a wobble:

- noise_floor:  a loss; low/high = value -/+ the training-noise floor;
- bootstrap_ci: a rate over samples; low/high = the 95% bootstrap CI of the mean;
- rep_range:    a timing; low/high = min/max over the reruns (NaN when the producer kept no spread
                or ran fewer than MIN_REPS_FOR_RANGE reruns);
- exact:        a deterministic number (counts, seeded results, closed forms); any difference is real.

Timings (`timing` = True) depend on the machine, so the stamps ride along as flat columns.
Absent tables are skipped; an `engine` column joins the key.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import pandas as pd

from inferlab import experiments
from inferlab.spec import BOOTSTRAP_CI, EXACT, NOISE_FLOOR, REP_RANGE, Metric, Spec

ID_COLUMNS = ["experiment", "metric", "key"]
# `source`: the report input the row was read from (a table key, "models/<name>", "milestones/<id>"),
# where the diff starts its walk for the row's cause.
# `engine` and `base_key`: the engine a row ran on and its key without the " [engine]" suffix, so that nothing
# reads the key back apart.
COLUMNS = [*ID_COLUMNS, "value", "text_value", "unit", "low", "high", "noise_kind", "timing", "higher_is_better",
           "source", "engine", "base_key"]
# Flat stamp columns; a stamp the caller does not know stays empty.
STAMP_COLUMNS = ["model", "checkpoint_sha256", "machine_cpu_model", "machine_device", "machine_device_name",
                 "machine_node", "machine_fingerprint", "repeats", "baseline", "contended"]
# The machine columns a timing is only comparable across when they are equal.
MACHINE_COLUMNS = ["machine_cpu_model", "machine_device", "machine_device_name", "machine_node", "machine_fingerprint"]


def missing(value) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def stamp_of_columns(values) -> dict:
    """{machine column: value} (a metric row's, or a run's) as the machine stamp it was written from;
    missing values are absent keys."""
    return {column.removeprefix("machine_"): value for column, value in values.items()
            if column in MACHINE_COLUMNS and not missing(value)}


# This run's roofline probe on every row: a speed calibration that tells two VMs of one kind apart.
CALIBRATION_COLUMNS = {"bandwidth_GB_per_s": "calibration_bandwidth_GB_per_s",
                       "peak_GFLOP_per_s": "calibration_peak_GFLOP_per_s"}

# A deterministic number is the same in two runs when it agrees to this relative tolerance: two
# machines that sum in another order differ by ~1e-16, and any real change is many orders larger.
# Timings are never "the same"; their rep range judges them.
IDENTICAL_RTOL = 1e-12
TOLERANCE = {EXACT: IDENTICAL_RTOL, NOISE_FLOOR: IDENTICAL_RTOL, BOOTSTRAP_CI: IDENTICAL_RTOL, REP_RANGE: 0.0}


# Across CPUs whose kernels differ (AVX-512 against AVX2, another core count's blocking), fp32 reductions sum
# in another order: a deterministic number then agrees to about this, and is not called different for it.
SUMMATION_RTOL = 1e-5


def identical(old: float, new: float, kind: str, rtol: float | None = None) -> bool:
    """Equal within the kind's relative tolerance (exactly equal for timings), or within rtol when given."""
    if old == new:
        return True
    tolerance = TOLERANCE.get(kind, 0.0) if rtol is None or kind == REP_RANGE else rtol
    return abs(new - old) <= tolerance * max(abs(old), abs(new))

# A min-max range over fewer reruns than this is no estimate of the noise (with 2 reruns a
# rerun's median falls outside the first run's range a third of the time); such rows keep
# NaN bounds and the diff says "no noise estimate" instead of guessing.
MIN_REPS_FOR_RANGE = 3

def _row(experiment: str, metric: str, key: str, value, unit: str, noise_kind: str, *,
         low=math.nan, high=math.nan, timing: bool = False, higher_is_better: bool | None = None,
         text_value: str | None = None, source: str | None = None) -> dict:
    return {"experiment": experiment, "metric": metric, "key": key,
            "value": float(value) if value is not None else math.nan, "text_value": text_value,
            "unit": unit, "low": float(low), "high": float(high), "noise_kind": noise_kind,
            "timing": timing, "higher_is_better": higher_is_better, "source": source}


def _records(df: pd.DataFrame | None) -> list[dict]:
    return [] if df is None or df.empty else df.to_dict("records")


def _bounds(metric: Metric, record: dict, value) -> dict:
    """low/high: a column range (NaN when too few reruns were kept for it to mean anything) or ± a spread."""
    if metric.spread:
        return {"low": value - record[metric.spread], "high": value + record[metric.spread]}
    if not metric.bounds:
        return {}
    reps = record.get(metric.reps) if metric.reps else MIN_REPS_FOR_RANGE
    if missing(reps) or int(reps) < MIN_REPS_FOR_RANGE:
        return {}
    return {"low": record.get(metric.bounds[0], math.nan), "high": record.get(metric.bounds[1], math.nan)}


def metric_rows(spec: Spec, metric: Metric, table: pd.DataFrame | None) -> list[dict]:
    """A spec's metric, one row per table row (see inferlab.spec.Metric)."""
    rows, seen = [], set()
    for record in _records(table):
        if metric.where and record.get(metric.where[0]) != metric.where[1]:
            continue
        value = record.get(metric.column) if metric.column else None
        if metric.skip_missing and metric.column and missing(value):
            continue
        try:
            text = metric.text.format(**record) if metric.text else None
        except KeyError:
            if metric.skip_missing:
                continue
            raise
        key = base_key = metric.key.format(**record)
        engine = record.get("engine")
        if not missing(engine):
            key, text = (f"{key} [{engine}]", text) if metric.by_engine else (key, text and f"{text} [{engine}]")
        name = metric.name.format(**record)
        if metric.once_per_key and (name, key) in seen:
            continue
        seen.add((name, key))
        direction = metric.higher_is_better
        row = _row(metric.experiment or spec.name, name, key, value, metric.unit, metric.noise,
                   **_bounds(metric, record, value), timing=metric.timing, text_value=text,
                   higher_is_better=direction.get(name) if isinstance(direction, Mapping) else direction,
                   source=metric.table)
        row.update(engine=None if missing(engine) else str(engine), base_key=base_key)
        if metric.timing and not missing(record.get("contended")):  # the flag of the job that measured this row
            row["contended"] = bool(record["contended"])
        rows.append(row)
    return rows


def model_rows(noise_floor: pd.DataFrame | None, metas: dict[str, dict] | None) -> list[dict]:
    """The noise floor itself and every model's validation loss, -/+ the floor."""
    rows, floor = [], math.nan
    if noise_floor is not None and not noise_floor.empty:
        floor = float(noise_floor["floor"].iloc[0])
        rows.append(_row("models", "noise_floor", "floor", floor, "nats", EXACT, source="noise_floor"))
    losses = {name: (meta["val_loss"], f"models/{name}") for name, meta in (metas or {}).items()
              if "val_loss" in meta}
    for r in _records(noise_floor):
        losses.setdefault(str(r["run"]), (r["val_loss"], "noise_floor"))
    for name, (loss, source) in sorted(losses.items()):
        rows.append(_row("models", "val_loss", name, loss, "nats", NOISE_FLOOR, low=loss - floor,
                         high=loss + floor, higher_is_better=False, source=source))
    return rows


def milestone_rows(milestones: pd.DataFrame | None) -> list[dict]:
    """Each milestone's status: value 1 for pass, 0 otherwise; the status word in text_value."""
    return [_row("milestones", "status", str(r["milestone"]), 1.0 if r["status"] == "pass" else 0.0, "",
                 EXACT, higher_is_better=True, text_value=str(r["status"]), source=f"milestones/{r['milestone']}")
            for r in _records(milestones)]


def probe_calibration(probes: pd.DataFrame | None) -> dict[str, float]:
    """{bandwidth_GB_per_s, peak_GFLOP_per_s}: the best rate any probe of this run reached; {} without a probe."""
    if probes is None or probes.empty:
        return {}
    rates = {"bandwidth_GB_per_s": probes.loc[probes["unit"] == "GB/s", "value"].max(),
             "peak_GFLOP_per_s": probes.loc[probes["unit"] == "GFLOP/s", "value"].max()}
    return {k: float(v) for k, v in rates.items() if not missing(float(v))}


def flat_stamps(stamps: dict) -> dict:
    """STAMP_COLUMNS from a flat dict or a milestone-style one ({"model": {...}, "machine": {...}, ...})."""
    flat = {k: v for k, v in stamps.items() if not isinstance(v, dict)}
    model = stamps.get("model")
    if isinstance(model, dict):
        flat.update({"model": model.get("model"), "checkpoint_sha256": model.get("checkpoint_sha256")})
    flat.update({f"machine_{k}": v for k, v in (stamps.get("machine") or {}).items()})
    return {column: flat.get(column) for column in STAMP_COLUMNS}


def _stamped(rows: Iterable[dict], stamps: dict) -> list[dict]:
    """stamps: see flat_stamps; per-experiment overrides (same shape) under stamps["experiments"]. A row that
    carries its own `contended` (its measuring job's) keeps it: one contended job does not mark the others'."""
    base = flat_stamps(stamps)
    overrides = {experiment: {k: v for k, v in flat_stamps(override).items() if v is not None}
                 for experiment, override in (stamps.get("experiments") or {}).items() if override}
    return [{**row, **base, **overrides.get(row["experiment"], {}),
             **({"contended": row["contended"]} if "contended" in row else {})} for row in rows]


def metrics_table(tables: dict[str, pd.DataFrame | None], milestones: pd.DataFrame | None, stamps: dict,
                  metas: dict[str, dict] | None = None) -> pd.DataFrame:
    """The tidy metrics table of one run.

    1. each known table that is present contributes its headline rows (absent ones none);
    2. the models' validation losses (meta.json, noise-floor runs) and the floor;
    3. each milestone's status;
    4. the stamps as flat columns on every row, and this run's probe rates (the calibration).
    """
    rows = [row for spec in experiments.SPECS for metric in spec.metrics
            for row in metric_rows(spec, metric, tables.get(metric.table))]
    rows += model_rows(tables.get("noise_floor"), metas)
    rows += milestone_rows(milestones)
    table = pd.DataFrame(_stamped(rows, stamps), columns=[*COLUMNS, *STAMP_COLUMNS])
    calibration = probe_calibration(tables.get("roofline_probe"))
    for field, column in CALIBRATION_COLUMNS.items():
        table[column] = calibration.get(field, math.nan)
    duplicated = table.duplicated(ID_COLUMNS, keep=False)
    if duplicated.any():
        raise ValueError(f"metrics table has duplicate keys: {table.loc[duplicated, ID_COLUMNS].values.tolist()}")
    table["higher_is_better"] = table["higher_is_better"].astype("boolean")
    table["contended"] = table["contended"].astype("boolean")
    for column in ("text_value", "source", "engine", "base_key", "model", "checkpoint_sha256", "repeats", "baseline",
                   *MACHINE_COLUMNS):
        table[column] = table[column].astype("string")
    return table

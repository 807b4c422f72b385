"""The tidy run metrics table (results/metrics.parquet): every headline number with its own noise.

One row per (experiment, metric, key). Each row carries the number's uncertainty as the
experiment measured it, so a diff between two runs can tell a real change from a wobble:

- noise_floor:  a loss; low/high = value -/+ the training-noise floor;
- bootstrap_ci: a rate over samples; low/high = the 95% bootstrap CI of the mean;
- rep_range:    a timing; low/high = min/max over the reruns (NaN when the producer kept no spread
                or ran fewer than MIN_REPS_FOR_RANGE reruns);
- exact:        a deterministic number (counts, seeded results, closed forms); any difference is real.

Timings (`timing` = True) depend on the machine, so the stamps ride along as flat columns.
The builder reads the tables as their producers write them and skips absent tables. Extra
columns flow through: an `engine` column joins the key, and every metric of the long-format
repetition table becomes rows, whatever its name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import pandas as pd

NOISE_FLOOR, BOOTSTRAP_CI, REP_RANGE, EXACT = "noise_floor", "bootstrap_ci", "rep_range", "exact"
# How a reader names each noise kind (the report's changes tables).
NOISE_WORDS = {NOISE_FLOOR: "± noise floor", BOOTSTRAP_CI: "95% bootstrap CI", REP_RANGE: "min–max over reruns",
               EXACT: "exact"}

ID_COLUMNS = ["experiment", "metric", "key"]
# `source`: the report input the row was read from (a table key, "models/<name>", "milestones/<id>"),
# where the diff starts its walk for the row's cause.
COLUMNS = [*ID_COLUMNS, "value", "text_value", "unit", "low", "high", "noise_kind", "timing", "higher_is_better",
           "source"]
# Flat stamp columns; a stamp the caller does not know stays empty.
STAMP_COLUMNS = ["model", "checkpoint_sha256", "machine_cpu_model", "machine_device", "machine_device_name",
                 "machine_node", "machine_fingerprint", "repeats", "baseline", "contended"]
# The machine columns a timing is only comparable across when they are equal.
MACHINE_COLUMNS = ["machine_cpu_model", "machine_device", "machine_device_name", "machine_node", "machine_fingerprint"]


def stamp_of_columns(values) -> dict:
    """{machine column: value} (a metric row's, or a run's) as the machine stamp it was written from;
    missing values are absent keys."""
    return {column.removeprefix("machine_"): value for column, value in values.items()
            if column in MACHINE_COLUMNS and not (value is None or value is pd.NA
                                                 or (isinstance(value, float) and math.isnan(value)))}


# This run's roofline probe on every row: a speed calibration that tells two VMs of one kind apart.
CALIBRATION_COLUMNS = {"bandwidth_GB_per_s": "calibration_bandwidth_GB_per_s",
                       "peak_GFLOP_per_s": "calibration_peak_GFLOP_per_s"}

# A deterministic number is the same in two runs when it agrees to this relative tolerance: two
# machines that sum in another order differ by ~1e-16, and any real change is many orders larger.
# Timings are never "the same"; their rep range judges them.
IDENTICAL_RTOL = 1e-12
TOLERANCE = {EXACT: IDENTICAL_RTOL, NOISE_FLOOR: IDENTICAL_RTOL, BOOTSTRAP_CI: IDENTICAL_RTOL, REP_RANGE: 0.0}


def identical(old: float, new: float, kind: str) -> bool:
    """Equal within the kind's relative tolerance (exactly equal for timings)."""
    if old == new:
        return True
    return abs(new - old) <= TOLERANCE.get(kind, 0.0) * max(abs(old), abs(new))

# A min-max range over fewer reruns than this is no estimate of the noise (with 2 reruns a
# rerun's median falls outside the first run's range a third of the time); such rows keep
# NaN bounds and the diff says "no noise estimate" instead of guessing.
MIN_REPS_FOR_RANGE = 3

# Direction of the repetition metrics; a metric not listed here (a new one) gets None (no direction).
REPETITION_DIRECTION = {"seq_rep_4": False, "distinct_1": True, "distinct_2": True,
                        "in_corpus_4gram_share": True, "nll_per_token": False}


def _row(experiment: str, metric: str, key: str, value, unit: str, noise_kind: str, *,
         low=math.nan, high=math.nan, timing: bool = False, higher_is_better: bool | None = None,
         text_value: str | None = None, source: str | None = None) -> dict:
    return {"experiment": experiment, "metric": metric, "key": key,
            "value": float(value) if value is not None else math.nan, "text_value": text_value,
            "unit": unit, "low": float(low), "high": float(high), "noise_kind": noise_kind,
            "timing": timing, "higher_is_better": higher_is_better, "source": source}


def _range(low, high, reps) -> dict:
    """low/high of a rep range, or NaN when too few reruns were kept for the range to mean anything."""
    if reps is None or _is_nan(reps) or int(reps) < MIN_REPS_FOR_RANGE:
        return {"low": math.nan, "high": math.nan}
    return {"low": low, "high": high}


def _key(record: dict, *parts: str, fmt: Callable[[dict], str] | None = None) -> str:
    """The row key from the named columns; an `engine` column, when present, is part of it."""
    text = fmt(record) if fmt else " ".join(str(record[p]) for p in parts)
    engine = record.get("engine")
    return f"{text} [{engine}]" if engine is not None and not _is_nan(engine) else text


def _is_nan(value) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _records(df: pd.DataFrame | None) -> list[dict]:
    return [] if df is None or df.empty else df.to_dict("records")


def _spec_group(record: dict) -> str:
    return f"{record['draft']} k={int(record['k'])}"


# ----------------------------------------------------------------------------- KV cache, roofline


def kv_summary_rows(summary: pd.DataFrame | None) -> list[dict]:
    """Per length: the no-cache/cache speed ratio; per (length, mode): ms/token. Both with rep ranges."""
    rows, seen = [], set()
    for r in _records(summary):
        length_key = _key(r, "length")
        if length_key not in seen:  # the ratio repeats on both mode rows of a length
            seen.add(length_key)
            rows.append(_row("kvcache", "speed_ratio", length_key, r["speed_ratio"], "x", REP_RANGE,
                             **_range(r["speed_ratio_min"], r["speed_ratio_max"], r.get("reps")), timing=True,
                             higher_is_better=True))
        rows.append(_row("kvcache", "ms_per_token", _key(r, fmt=lambda x: f"{x['length']} {x['mode']}"),
                         r["ms_per_token_median"], "ms/token", REP_RANGE,
                         **_range(r["ms_per_token_min"], r["ms_per_token_max"], r.get("reps")), timing=True,
                         higher_is_better=False))
    return rows


def kv_fit_rows(fit: pd.DataFrame | None) -> list[dict]:
    """The fit t(n) = a + b n of the uncached step, once per engine (the fit table repeats it on every
    length's row), and the ratio it predicts per length; fitted from timings, no spread kept."""
    rows, seen = [], set()
    for r in _records(fit):
        fit_key = _key(r, fmt=lambda _: "uncached step")
        if fit_key not in seen:
            seen.add(fit_key)
            rows.append(_row("kvcache", "fit_a_ms", fit_key, r["a_ms"], "ms", REP_RANGE, timing=True))
            rows.append(_row("kvcache", "fit_b_ms_per_position", fit_key, r["b_ms_per_position"], "ms/position",
                             REP_RANGE, timing=True))
        rows.append(_row("kvcache", "predicted_ratio", _key(r, "length"), r["predicted_ratio"], "x", REP_RANGE,
                         timing=True, higher_is_better=True))
    return rows


def roofline_rows(roofline: pd.DataFrame | None) -> list[dict]:
    """Our bound (from probed rates, so a timing) against the measured ms/token; the anchor's bound is exact."""
    rows = []
    for r in _records(roofline):
        if r.get("subject") == "ours":
            key = _key(r, "model")
            rows.append(_row("roofline", "lower_bound_ms_per_token", key, r["lower_bound_ms_per_token"],
                             "ms/token", REP_RANGE, timing=True, higher_is_better=False))
            rows.append(_row("roofline", "measured_over_bound", key, r["measured_over_bound"], "x", REP_RANGE,
                             timing=True, higher_is_better=False))
        else:
            key = _key(r, fmt=lambda x: f"{x['model']} ctx={int(x['context_tokens'])}")
            rows.append(_row("roofline", "lower_bound_ms_per_token", key, r["lower_bound_ms_per_token"],
                             "ms/token", EXACT, higher_is_better=False))
    return rows


# ------------------------------------------------------------------------------------------ sampling


def sp_distribution_rows(distribution: pd.DataFrame | None) -> list[dict]:
    """Next-token entropy and tokens kept per grid cell: closed forms of the logits, exact."""
    rows = []
    for r in _records(distribution):
        key = _key(r, "cell")
        rows.append(_row("sampling", "entropy_bits", key, r["entropy_bits"], "bits", EXACT))
        rows.append(_row("sampling", "kept", key, r["kept"], "tokens", EXACT))
    return rows


def sp_repetition_rows(repetition: pd.DataFrame | None) -> list[dict]:
    """Every (cell, metric) of the long-format summary with its bootstrap CI; new metrics and rows included."""
    return [_row("sampling", str(r["metric"]), _key(r, "cell"), r["mean"], "", BOOTSTRAP_CI,
                 low=r["ci_low"], high=r["ci_high"], higher_is_better=REPETITION_DIRECTION.get(str(r["metric"])))
            for r in _records(repetition)]


def sp_default_rows(default: pd.DataFrame | None) -> list[dict]:
    rows = []
    for r in _records(default):
        rows.append(_row("sampling", "default_cell", "chosen", None, "", EXACT, text_value=str(r["cell"])))
        if "min_p_decision" in r:
            rows.append(_row("sampling", "min_p_decision", "chosen", None, "", EXACT,
                             text_value=str(r["min_p_decision"])))
    return rows


# --------------------------------------------------------------------------------------- speculative

# Counter-derived numbers repeat exactly under the same seeds; the rest come from forward timings.
SPEC_EXACT = {"alpha": ("", True), "tokens_per_target_forward": ("tokens/forward", True),
              "formula_tokens_per_target_forward": ("tokens/forward", True),
              "speedup_theory_params": ("x", True)}
SPEC_TIMED = {"speedup_theory_time": "x", "speedup_forward_model": "x", "speedup_at_bound": "x"}


def spec_summary_rows(summary: pd.DataFrame | None) -> list[dict]:
    rows = []
    for r in _records(summary):
        key = _key(r, fmt=_spec_group)
        for metric, (unit, higher) in SPEC_EXACT.items():
            rows.append(_row("speculative", metric, key, r[metric], unit, EXACT, higher_is_better=higher))
        for metric, unit in SPEC_TIMED.items():
            rows.append(_row("speculative", metric, key, r[metric], unit, REP_RANGE, timing=True,
                             higher_is_better=True))
        rows.append(_row("speculative", "wall_speedup", key, r["wall_speedup"], "x", REP_RANGE,
                         **_range(r.get("wall_speedup_min", math.nan), r.get("wall_speedup_max", math.nan),
                                  r.get("timing_reps")), timing=True, higher_is_better=True))
    return rows


def spec_best_rows(best: pd.DataFrame | None) -> list[dict]:
    """The recommended (draft, k): the text is the group, the value the criterion's."""
    return [_row("speculative", "chosen_group", str(r["column"]), r["value"], "", REP_RANGE, timing=True,
                 text_value=_key(r, fmt=_spec_group))
            for r in _records(best) if r["criterion"] == "chosen"]


# ---------------------------------------------------------------------------------------- quantization


def quant_summary_rows(summary: pd.DataFrame | None) -> list[dict]:
    """Per scheme: Δloss against the floor; KL, top-1 agreement and effective bits are deterministic."""
    rows = []
    for r in _records(summary):
        key, floor = _key(r, "scheme"), float(r["noise_floor"])
        rows.append(_row("quant", "delta_loss", key, r["delta_loss"], "nats", NOISE_FLOOR,
                         low=r["delta_loss"] - floor, high=r["delta_loss"] + floor, higher_is_better=False))
        rows.append(_row("quant", "kl_mean_nats", key, r["kl_mean_nats"], "nats/token", EXACT,
                         higher_is_better=False))
        rows.append(_row("quant", "top1_agreement", key, r["top1_agreement"], "", EXACT, higher_is_better=True))
        rows.append(_row("quant", "effective_bits_per_weight", key, r["effective_bits_per_weight"], "bits",
                         EXACT, higher_is_better=False))
        if not _is_nan(r.get("speedup_vs_fp32", math.nan)):
            rows.append(_row("quant", "speedup_vs_fp32", key, r["speedup_vs_fp32"], "x", REP_RANGE, timing=True,
                             higher_is_better=True))
    return rows


def quant_choice_rows(choice: pd.DataFrame | None) -> list[dict]:
    return [_row("quant", "chosen_scheme", "chosen", r["bits"], "bits", EXACT, text_value=str(r["scheme"]))
            for r in _records(choice)]


# ------------------------------------------------------------------------------------- models, noise


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
    return {k: float(v) for k, v in rates.items() if not _is_nan(float(v))}


# One builder per report table key (REPORT_TABLES in workflow/rules/report.smk).
TABLE_ROWS: dict[str, Callable[[pd.DataFrame | None], list[dict]]] = {
    "kv_summary": kv_summary_rows, "kv_fit": kv_fit_rows, "roofline": roofline_rows,
    "sp_distribution": sp_distribution_rows, "sp_repetition": sp_repetition_rows, "sp_default": sp_default_rows,
    "spec_summary": spec_summary_rows, "spec_best": spec_best_rows,
    "quant_summary": quant_summary_rows, "quant_choice": quant_choice_rows,
}


def flat_stamps(stamps: dict) -> dict:
    """STAMP_COLUMNS from a flat dict or a milestone-style one ({"model": {...}, "machine": {...}, ...})."""
    flat = {k: v for k, v in stamps.items() if not isinstance(v, dict)}
    model = stamps.get("model")
    if isinstance(model, dict):
        flat.update({"model": model.get("model"), "checkpoint_sha256": model.get("checkpoint_sha256")})
    flat.update({f"machine_{k}": v for k, v in (stamps.get("machine") or {}).items()})
    if "node" in flat and "machine_node" not in flat:
        flat["machine_node"] = flat["node"]
    return {column: None if flat.get(column) is None else flat[column] for column in STAMP_COLUMNS}


def _stamped(rows: Iterable[dict], stamps: dict) -> list[dict]:
    """stamps: see flat_stamps; per-experiment overrides (same shape) under stamps["experiments"]."""
    base = flat_stamps(stamps)
    per_experiment = stamps.get("experiments") or {}
    out = []
    for row in rows:
        override = per_experiment.get(row["experiment"])
        stamp = {**base, **{k: v for k, v in flat_stamps(override).items() if v is not None}} if override else base
        out.append({**row, **stamp})
    return out


def metrics_table(tables: dict[str, pd.DataFrame | None], milestones: pd.DataFrame | None, stamps: dict,
                  metas: dict[str, dict] | None = None) -> pd.DataFrame:
    """The tidy metrics table of one run.

    1. each known table that is present contributes its headline rows (absent ones none);
    2. the models' validation losses (meta.json, noise-floor runs) and the floor;
    3. each milestone's status;
    4. the stamps as flat columns on every row, and this run's probe rates (the calibration).
    """
    rows = [{**row, "source": key} for key, build in TABLE_ROWS.items() for row in build(tables.get(key))]
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
    for column in ("text_value", "source", "model", "checkpoint_sha256", "repeats", "baseline", *MACHINE_COLUMNS):
        table[column] = table[column].astype("string")
    return table

"""The verdict and the cause of every metric between two runs' metrics tables.

Each metric is judged against its own noise (see inferlab.review.metrics for the kinds):
- exact:        changed when different at all;
- noise_floor:  changed when |Δ| exceeds the floor;
- bootstrap_ci: changed when the two CIs do not overlap;
- rep_range:    changed when the new median lies outside the old rep range widened by the new
                range's full width; not comparable when the machine differs or a run was contended;
                no noise estimate when neither run kept a spread;
- any text (a status, a choice) that differs is changed; a milestone going pass <-> not pass
  is a flip, and flips head the diff.
A deterministic number within IDENTICAL_RTOL of the other (summation order) is unchanged; between
two machines whose kernels differ, within SUMMATION_RTOL.

Every metric that changed, flipped or is not comparable, and every deterministic metric that
differs at all, gets its causes (inferlab.review.attribution): config, code, library, input,
machine, or **unexplained** when nothing recorded differs. Unexplained changes head the diff.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from inferlab.review.attribution import (
    CAUSE_SEPARATOR,
    CODE,
    CONTENDED,
    MACHINE,
    NOISE,
    NOT_RECORDED,
    UNEXPLAINED,
    Cause,
    Comparison,
    calibration_moves,
    machine_moves,
    render,
    same_machine,
)
from inferlab.review.lineage_graph import STALE
from inferlab.review.metrics import (
    CALIBRATION_COLUMNS,
    ID_COLUMNS,
    MACHINE_COLUMNS,
    SUMMATION_RTOL,
    identical,
    missing,
    stamp_of_columns,
)
from inferlab.spec import BOOTSTRAP_CI, EXACT, NOISE_FLOOR, REP_RANGE

FLIPPED, CHANGED, ADDED, REMOVED = "flipped", "changed", "added", "removed"
NOT_COMPARABLE, NO_NOISE, WITHIN, UNCHANGED = "not comparable", "no noise estimate", "within noise", "unchanged"
# The order of the diff: what a reviewer must see first.
VERDICT_ORDER = [FLIPPED, CHANGED, ADDED, REMOVED, NOT_COMPARABLE, NO_NOISE, WITHIN, UNCHANGED]
SHOWN = {FLIPPED, CHANGED, ADDED, REMOVED, NOT_COMPARABLE}
SIDES = ("old", "new")


def same(a, b) -> bool:
    return (missing(a) and missing(b)) or (not missing(a) and not missing(b) and a == b)


def _contended(row: pd.Series) -> bool:
    return any(not missing(row.get(f"contended_{side}")) and bool(row.get(f"contended_{side}")) for side in SIDES)


def _machines(row: pd.Series) -> tuple[tuple[dict, dict], tuple[dict, dict]]:
    """The machine stamps (the fields machine_moves reads) and probe rates a metric was measured with,
    each as (old, new), from its machine and calibration columns."""
    stamps = tuple(stamp_of_columns({c: row.get(f"{c}_{side}") for c in MACHINE_COLUMNS}) for side in SIDES)
    probes = tuple({field: row.get(f"{column}_{side}") for field, column in CALIBRATION_COLUMNS.items()
                    if not missing(row.get(f"{column}_{side}"))} for side in SIDES)
    return stamps, probes


def _machine_moves(row: pd.Series) -> dict[str, tuple]:
    """What differs between the two machines a number was measured on; {} on the same machine
    (same_machine) with probes that agree."""
    stamps, probes = _machines(row)
    return {**machine_moves(*stamps), **calibration_moves(*probes)}


def _timing_verdict(row: pd.Series) -> str:
    """Changed when the new median is outside the old rep range widened by the new range's width.

    Widening by the full width (not just the median-to-edge distances) keeps the false alarm
    rate of two reruns of the same thing low: in a simulation with normal noise it is about
    4% per metric at 3 reps and 0.1% at 5 (against 18% and 3% for the one-sided widening).
    A missing range on one side counts as zero width; on both, there is no noise estimate.
    """
    old, new = row["value_old"], row["value_new"]
    bounds = [row["low_old"], row["high_old"], row["low_new"], row["high_new"]]
    if all(missing(b) for b in bounds):
        return NO_NOISE
    old_low, old_high, new_low, new_high = (v if not missing(v) else base for v, base in
                                            zip(bounds, (old, old, new, new), strict=True))
    spread = new_high - new_low
    low, high = old_low - spread, old_high + spread
    return CHANGED if new < low or new > high else WITHIN


def _number_verdict(row: pd.Series) -> str:
    old, new, kind = row["value_old"], row["value_new"], row["noise_kind_new"]
    if missing(old) or missing(new):
        return UNCHANGED if missing(old) and missing(new) else CHANGED
    if old == new or (kind == row["noise_kind_old"] and identical(old, new, kind)):
        return UNCHANGED
    if kind == EXACT or kind != row["noise_kind_old"]:
        return CHANGED
    if kind == NOISE_FLOOR:
        floors = [(row[f"high_{s}"] - row[f"low_{s}"]) / 2 for s in ("new", "old")]
        floor = next((f for f in floors if not missing(f)), None)
        if floor is None:
            return NO_NOISE
        return CHANGED if abs(new - old) > floor else WITHIN
    if kind == BOOTSTRAP_CI:
        if any(missing(row[c]) for c in ("low_old", "high_old", "low_new", "high_new")):
            return NO_NOISE
        return CHANGED if row["low_new"] > row["high_old"] or row["high_new"] < row["low_old"] else WITHIN
    if kind == REP_RANGE:
        return _timing_verdict(row)
    raise ValueError(f"unknown noise_kind {kind!r} for {row['experiment']}/{row['metric']}/{row['key']}")


def verdict(row: pd.Series) -> str:
    """The verdict for one metric present in both runs (columns suffixed _old / _new)."""
    old_text, new_text = row["text_value_old"], row["text_value_new"]
    if row["experiment"] == "milestones" and not same(old_text, new_text) and "pass" in (old_text, new_text):
        return FLIPPED
    if bool(row["timing_new"]) and same(old_text, new_text) and same(row["value_old"], row["value_new"]):
        return UNCHANGED  # the same measurement, reused by both runs: nothing to compare across machines
    if bool(row["timing_new"]):
        stamps, probes = _machines(row)
        if not same_machine(*stamps) or _contended(row) or calibration_moves(*probes):
            return NOT_COMPARABLE
    if not same(old_text, new_text):
        return CHANGED
    return _number_verdict(row)


def _differs(row: pd.Series) -> bool:
    """A deterministic metric present in both runs whose value or text differs beyond its tolerance."""
    if bool(row["timing_new"]) or row["experiment"] == "milestones":
        return False
    if not same(row["text_value_old"], row["text_value_new"]):
        return True
    old, new = row["value_old"], row["value_new"]
    if missing(old) or missing(new):
        return not (missing(old) and missing(new))
    stamps, _ = _machines(row)
    return not identical(old, new, row["noise_kind_new"], None if same_machine(*stamps) else SUMMATION_RTOL)


# A milestone turns stale when the code (or an input) its tables were made with is no longer the
# checkout's. That is the cause whatever the comparison of its tables finds: the tables may be the very
# same files, and two runs' files differ in their stamps (times, load) even when every value agrees.
def _staleness_flip(row: pd.Series) -> bool:
    texts = {str(row.get("text_value_old")), str(row.get("text_value_new"))}
    return str(row.get("experiment")) == "milestones" and STALE in texts and len(texts) == 2


def _timing_causes(row: pd.Series, found: list[Cause] | None) -> list[Cause]:
    """A timing's causes: a contended run and the machines first, then what the lineage names. A timing
    table upstream that changed with nothing recorded differing was measured again: for a timing that is
    noise, not a determinism bug."""
    causes = [Cause(CONTENDED)] if _contended(row) else []
    moved = _machine_moves(row)
    if moved:
        causes.append(Cause.changed(MACHINE, moved))
    causes += [c for c in found or [] if c.kind != UNEXPLAINED and (c.kind != MACHINE or not moved)]
    remeasured = tuple(c.field[0] for c in found or [] if c.kind == UNEXPLAINED and c.field)
    if remeasured:
        causes.append(Cause(NOISE, field=remeasured))
    return causes or [Cause(NOISE)]


def explain(row: pd.Series, comparison: Comparison | None) -> list[Cause]:
    """The causes of one moved metric, most specific first (see inferlab.review.attribution)."""
    source = row.get("source_new") if not missing(row.get("source_new")) else row.get("source_old")
    found = comparison.source_causes(None if missing(source) else str(source)) if comparison else None
    if bool(row["timing_new"]):
        return _timing_causes(row, found)
    if _staleness_flip(row):
        return [Cause(CODE)]
    if found:
        return found
    if found is not None:
        return [Cause(UNEXPLAINED)]
    records = (comparison.old, comparison.new) if comparison else ({}, {})
    moved = machine_moves(*(record.get("machine") for record in records)) or _machine_moves(row)
    return ([Cause.changed(MACHINE, moved)] if moved else []) + [Cause(NOT_RECORDED)]


def diff_metrics(old: pd.DataFrame, new: pd.DataFrame, old_record: dict | None = None,
                 new_record: dict | None = None) -> pd.DataFrame:
    """One row per metric in either run: old, new, delta, delta_pct, verdict, fingerprint_old/_new (its
    machines), cause_kind, causes (the records) and cause (their text); unexplained changes first, then
    flips. Without the runs' causes records the causes come from the metrics' own machine stamps only."""
    for side, table in (("old", old), ("new", new)):
        duplicated = table.duplicated(ID_COLUMNS)
        if duplicated.any():
            raise ValueError(f"the {side} metrics table repeats {table.loc[duplicated, ID_COLUMNS].values.tolist()}")
    # a column one run lacks (a table from before it existed) must still read as "absent" on that side
    columns = list(dict.fromkeys([*old.columns, *new.columns]))
    old, new = old.reindex(columns=columns), new.reindex(columns=columns)
    merged = old.merge(new, on=ID_COLUMNS, how="outer", suffixes=("_old", "_new"), indicator=True)
    rows = [(side, row) for side, (_, row) in zip(merged["_merge"], merged.iterrows(), strict=True)]
    judged = [ADDED if side == "right_only" else REMOVED if side == "left_only" else verdict(row)
              for side, row in rows]
    differs = [side == "both" and _differs(row) for side, row in rows]
    comparison = Comparison(old_record, new_record) if old_record and new_record else None
    causes = [explain(row, comparison) if v in (FLIPPED, CHANGED, NOT_COMPARABLE) or d else []
              for v, d, (_, row) in zip(judged, differs, rows, strict=True)]
    out = merged[ID_COLUMNS].copy()
    out["unit"] = merged["unit_new"].fillna(merged["unit_old"])
    out["source"] = merged["source_new"].fillna(merged["source_old"])  # the report input the metric is read from
    out["old"], out["new"] = merged["value_old"], merged["value_new"]
    out["old_text"], out["new_text"] = merged["text_value_old"], merged["text_value_new"]
    out["delta"] = out["new"] - out["old"]
    with np.errstate(divide="ignore", invalid="ignore"):
        out["delta_pct"] = np.where(out["old"].abs() > 0, 100.0 * out["delta"] / out["old"].abs(), np.nan)
    out["noise_kind"] = merged["noise_kind_new"].fillna(merged["noise_kind_old"])
    out["timing"] = merged["timing_new"].fillna(merged["timing_old"]).astype(bool)
    out["verdict"] = judged
    # the machines each number was measured on: what the report names when timings cannot be compared
    out["fingerprint_old"] = merged.get("machine_fingerprint_old")
    out["fingerprint_new"] = merged.get("machine_fingerprint_new")
    out["deterministic_differs"] = differs
    out["cause_kind"] = [c[0].kind if c else None for c in causes]
    out["causes"] = [tuple(c) for c in causes]
    out["cause"] = [CAUSE_SEPARATOR.join(map(render, c)) if c else None for c in causes]
    rank = out["verdict"].map({v: i for i, v in enumerate(VERDICT_ORDER)})
    rank = rank.where(out["cause_kind"] != UNEXPLAINED, -1)
    return (out.assign(_rank=rank).sort_values(["_rank", *ID_COLUMNS], kind="stable")
            .drop(columns="_rank").reset_index(drop=True))

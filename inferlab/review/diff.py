"""A noise-aware diff of two runs' metrics tables: what changed, and is it real?

    python -m inferlab.review.diff [OLD] [NEW]      # Markdown to the terminal
    python -m inferlab.review.diff --pin            # refresh the reference pinned in git

OLD and NEW are metrics.parquet files or ledger entries (results/history/<run_id>/). NEW defaults
to results/metrics.parquet (else the latest ledger entry); OLD to the ledger entry before NEW,
else to the pinned reference reports/reference/metrics.parquet.

Each metric is judged against its own noise (see inferlab.review.metrics for the kinds):
- exact:        changed when different at all;
- noise_floor:  changed when |Δ| exceeds the floor;
- bootstrap_ci: changed when the two CIs do not overlap;
- rep_range:    changed when the new median lies outside the old rep range widened by the new
                range's full width; not comparable when the machine differs or a run was contended;
                no noise estimate when neither run kept a spread;
- any text (a status, a choice) that differs is changed; a milestone going pass <-> not pass
  is a flip, and flips head the diff.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from inferlab.jobs.tables import read_provenance, write_table
from inferlab.review import ledger
from inferlab.review.diff_figure import diff_figure
from inferlab.review.metrics import BOOTSTRAP_CI, EXACT, ID_COLUMNS, MACHINE_COLUMNS, NOISE_FLOOR, REP_RANGE
from inferlab.review.milestone_map import MILESTONE_INPUTS
from inferlab.review.numbers import fmt

FLIPPED, CHANGED, ADDED, REMOVED = "flipped", "changed", "added", "removed"
NOT_COMPARABLE, NO_NOISE, WITHIN, UNCHANGED = "not comparable", "no noise estimate", "within noise", "unchanged"
# The order of the diff: what a reviewer must see first.
VERDICT_ORDER = [FLIPPED, CHANGED, ADDED, REMOVED, NOT_COMPARABLE, NO_NOISE, WITHIN, UNCHANGED]
SHOWN = {FLIPPED, CHANGED, ADDED, REMOVED, NOT_COMPARABLE}

DEFAULT_NEW = Path("results/metrics.parquet")
DEFAULT_HISTORY = Path("results/history")
DEFAULT_REFERENCE = Path("reports/reference/metrics.parquet")


# ----------------------------------------------------------------------------------------- verdicts


def _missing(value) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _same(a, b) -> bool:
    return (_missing(a) and _missing(b)) or (not _missing(a) and not _missing(b) and a == b)


def _contended(row: pd.Series, side: str) -> bool:
    value = row.get(f"contended_{side}")
    return not _missing(value) and bool(value)


def _machine_differs(row: pd.Series) -> bool:
    return any(not _same(row.get(f"{c}_old"), row.get(f"{c}_new")) for c in MACHINE_COLUMNS)


def _timing_verdict(row: pd.Series) -> str:
    """Changed when the new median is outside the old rep range widened by the new range's width.

    Widening by the full width (not just the median-to-edge distances) keeps the false alarm
    rate of two reruns of the same thing low: in a simulation with normal noise it is about
    4% per metric at 3 reps and 0.1% at 5 (against 18% and 3% for the one-sided widening).
    A missing range on one side counts as zero width; on both, there is no noise estimate.
    """
    old, new = row["value_old"], row["value_new"]
    bounds = [row["low_old"], row["high_old"], row["low_new"], row["high_new"]]
    if all(_missing(b) for b in bounds):
        return NO_NOISE
    old_low, old_high, new_low, new_high = (v if not _missing(v) else base for v, base in
                                            zip(bounds, (old, old, new, new), strict=True))
    spread = new_high - new_low
    low, high = old_low - spread, old_high + spread
    return CHANGED if new < low or new > high else WITHIN


def _number_verdict(row: pd.Series) -> str:
    old, new, kind = row["value_old"], row["value_new"], row["noise_kind_new"]
    if _missing(old) or _missing(new):
        return UNCHANGED if _missing(old) and _missing(new) else CHANGED
    if old == new:
        return UNCHANGED
    if kind == EXACT or kind != row["noise_kind_old"]:
        return CHANGED
    if kind == NOISE_FLOOR:
        floors = [(row[f"high_{s}"] - row[f"low_{s}"]) / 2 for s in ("new", "old")]
        floor = next((f for f in floors if not _missing(f)), math.nan)
        if _missing(floor):
            return NO_NOISE
        return CHANGED if abs(new - old) > floor else WITHIN
    if kind == BOOTSTRAP_CI:
        if any(_missing(row[c]) for c in ("low_old", "high_old", "low_new", "high_new")):
            return NO_NOISE
        return CHANGED if row["low_new"] > row["high_old"] or row["high_new"] < row["low_old"] else WITHIN
    if kind == REP_RANGE:
        return _timing_verdict(row)
    raise ValueError(f"unknown noise_kind {kind!r} for {row['experiment']}/{row['metric']}/{row['key']}")


def verdict(row: pd.Series) -> str:
    """The verdict for one metric present in both runs (columns suffixed _old / _new)."""
    old_text, new_text = row["text_value_old"], row["text_value_new"]
    if row["experiment"] == "milestones" and not _same(old_text, new_text) and "pass" in (old_text, new_text):
        return FLIPPED
    if bool(row["timing_new"]) and (_machine_differs(row) or _contended(row, "old") or _contended(row, "new")):
        return NOT_COMPARABLE
    if not _same(old_text, new_text):
        return CHANGED
    return _number_verdict(row)


def diff_metrics(old: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """One row per metric in either run: old, new, delta, delta_pct, verdict; flips first."""
    for side, table in (("old", old), ("new", new)):
        duplicated = table.duplicated(ID_COLUMNS)
        if duplicated.any():
            raise ValueError(f"the {side} metrics table repeats {table.loc[duplicated, ID_COLUMNS].values.tolist()}")
    merged = old.merge(new, on=ID_COLUMNS, how="outer", suffixes=("_old", "_new"), indicator=True)
    merged["verdict"] = [ADDED if side == "right_only" else REMOVED if side == "left_only" else verdict(row)
                         for side, (_, row) in zip(merged["_merge"], merged.iterrows(), strict=True)]
    out = merged[ID_COLUMNS].copy()
    out["unit"] = merged["unit_new"].fillna(merged["unit_old"])
    out["old"], out["new"] = merged["value_old"], merged["value_new"]
    out["old_text"], out["new_text"] = merged["text_value_old"], merged["text_value_new"]
    out["delta"] = out["new"] - out["old"]
    with np.errstate(divide="ignore", invalid="ignore"):
        out["delta_pct"] = np.where(out["old"].abs() > 0, 100.0 * out["delta"] / out["old"].abs(), np.nan)
    out["noise_kind"] = merged["noise_kind_new"].fillna(merged["noise_kind_old"])
    out["timing"] = merged["timing_new"].fillna(merged["timing_old"]).astype(bool)
    out["verdict"] = merged["verdict"]
    rank = out["verdict"].map({v: i for i, v in enumerate(VERDICT_ORDER)})
    return (out.assign(_rank=rank).sort_values(["_rank", *ID_COLUMNS], kind="stable")
            .drop(columns="_rank").reset_index(drop=True))


# ----------------------------------------------------------------------------------------- Markdown


def _fmt(value, text=None) -> str:
    if not _missing(text):
        return str(text)
    return "–" if _missing(value) else fmt(float(value))


def _signed(value, suffix: str = "") -> str:
    if _missing(value):
        return "–"
    return f"{value:+.0f}{suffix}" if abs(value) >= 100 else f"{value:+.3g}{suffix}"


def counts(diff: pd.DataFrame) -> dict[str, int]:
    return {v: int((diff["verdict"] == v).sum()) for v in VERDICT_ORDER}


def to_markdown(diff: pd.DataFrame, old_label: str, new_label: str, show_all: bool = False,
                note: str | None = None) -> str:
    """The "Changes since …" section: a count line, any note (configs differ), then the table of
    what needs a look."""
    tally = counts(diff)
    lines = [f"## Changes since {old_label}", "",
             f"Comparing **{new_label}** against **{old_label}**: "
             + ", ".join(f"{n} {v}" for v, n in tally.items() if n) + ".", ""]
    if note:
        lines += [note, ""]
    shown = diff if show_all else diff[diff["verdict"].isin(SHOWN)]
    if shown.empty:
        lines.append("No metric changed beyond its noise.")
        return "\n".join(lines) + "\n"
    lines += ["| verdict | experiment | metric | key | old | new | Δ | Δ% | noise |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in shown.itertuples():
        unit = f" {r.unit}" if isinstance(r.unit, str) and r.unit else ""
        texts = not (_missing(r.old_text) and _missing(r.new_text))  # a status or a choice: no Δ
        delta, pct = (math.nan, math.nan) if texts else (r.delta, r.delta_pct)
        lines.append(f"| **{r.verdict}** | {r.experiment} | {r.metric} | {r.key} | {_fmt(r.old, r.old_text)} | "
                     f"{_fmt(r.new, r.new_text)} | {_signed(delta, unit)} | {_signed(pct, '%')} | "
                     f"{r.noise_kind} |")
    hidden = len(diff) - len(shown)
    if hidden:
        lines += ["", f"{hidden} more metrics within noise, unchanged or without a noise estimate "
                      "(`--all` lists them)."]
    return "\n".join(lines) + "\n"




def milestone_change_lines(diff: pd.DataFrame, listed: int = 3) -> dict[str, str]:
    """One line per milestone for its card: a flip, the first few changes, the rest as counts."""
    lines = {}
    for milestone, inputs in MILESTONE_INPUTS.items():
        experiments = inputs.experiments
        status = diff[(diff.experiment == "milestones") & (diff.key == milestone)]
        rows = diff[diff.experiment.isin(experiments)]
        parts = []
        if not status.empty and status.iloc[0].verdict == FLIPPED:
            parts.append(f"flipped {status.iloc[0].old_text} → {status.iloc[0].new_text}")
        changes = rows[rows.verdict == CHANGED]
        for r in changes.head(listed).itertuples():
            text = (f"{_fmt(r.old, r.old_text)} → {_fmt(r.new, r.new_text)}" if not _missing(r.new_text)
                    or not _missing(r.old_text) else f"{_signed(r.delta)} ({_signed(r.delta_pct, '%')})")
            parts.append(f"{r.metric} {r.key}: {text}")
        if len(changes) > listed:
            parts.append(f"{len(changes) - listed} more changed")
        tally = counts(rows)
        rest = ", ".join(f"{tally[v]} {v}" for v in (ADDED, REMOVED, NOT_COMPARABLE, WITHIN) if tally[v])
        if rows.empty and status.empty:
            lines[milestone] = "nothing to compare"
        elif parts:
            lines[milestone] = "; ".join(parts + ([rest] if rest else []))
        else:
            lines[milestone] = "no change beyond noise" + (f" ({rest})" if rest else "")
    return lines


# ------------------------------------------------------------------------------- for the report rule


@dataclass
class Changes:
    """What the report's "Changes since …" section shows; old_label is None when there is nothing to compare."""

    old_label: str | None
    table: pd.DataFrame | None
    markdown: str
    figure_png: bytes | None


def config_of(path: Path) -> str | None:
    """The config_sha256 a metrics table was made with: a ledger entry's manifest, else the
    parquet's provenance (results/metrics.parquet and a pinned reference carry it); None if unknown."""
    path = Path(path)
    if path.is_dir():
        return ledger.read_manifest(path).get("config_sha256")
    try:
        return read_provenance(path).get("config_sha256")
    except (OSError, ValueError):
        return None


def config_note(old_config: str | None, new_config: str | None) -> str | None:
    """A warning when the two runs' configurations differ, so that every 'changed' is read as
    the configuration's effect first; None when they agree or either is unknown."""
    if not old_config or not new_config or old_config == new_config:
        return None
    return (f"**The two runs used different configurations** (config sha256 {old_config[:12]} → "
            f"{new_config[:12]}): differences below mix the configuration's effect with the code's.")


def changes_since(new: pd.DataFrame, history: Path = DEFAULT_HISTORY,
                  reference: Path = DEFAULT_REFERENCE, new_config: str | None = None) -> Changes:
    """The diff of this run's table against the latest ledger entry, else the pinned reference.

    Call it before this run is appended to the ledger (the report must show the diff, and the
    ledger records the report's hashes, so the append comes last).
    """
    try:
        old_path = default_old(None, new, Path(history), Path(reference))
        old = load(old_path)
    except FileNotFoundError:
        return Changes(None, None, "## Changes since …\n\nNo earlier run in the ledger and no pinned "
                       f"reference ({reference}): nothing to compare with yet.\n", None)
    except ledger.UnreadableRecord as err:
        return Changes(None, None, f"## Changes since …\n\nNo comparison: {err}. The comparison material "
                       "is optional, so this report was built without it; repair or remove that file "
                       "(re-pin the reference with `python -m inferlab.review.diff --pin`).\n", None)
    table = diff_metrics(old, new)
    note = config_note(config_of(old_path), new_config)
    return Changes(_label(old_path), table, to_markdown(table, _label(old_path), "this run", note=note),
                   diff_figure(old, new))


# ---------------------------------------------------------------------------------------------- CLI


def load(path: str | Path) -> pd.DataFrame:
    """A metrics table from a parquet file or a ledger entry directory."""
    path = Path(path)
    file = path / ledger.METRICS_FILE if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(f"no metrics table at {file}")
    try:
        return pd.read_parquet(file)
    except (OSError, ValueError, pa.ArrowException) as err:  # ArrowInvalid is a ValueError too
        raise ledger.UnreadableRecord(f"{file} could not be read ({type(err).__name__}: {err})") from err


def default_new(history: Path) -> Path:
    if DEFAULT_NEW.is_file():
        return DEFAULT_NEW
    latest = ledger.previous_run(history)
    if latest is None:
        raise FileNotFoundError(f"no {DEFAULT_NEW} and no ledger entry in {history}: run the workflow first")
    return latest


def default_old(new_path: Path | None, new_table: pd.DataFrame, history: Path, reference: Path) -> Path:
    """The ledger entry before NEW, else the pinned reference.

    new_path: NEW's file or ledger entry; None for a run not yet in the ledger. When NEW is a
    file whose content equals the latest entry's, that entry is NEW itself and is skipped.
    """
    if new_path is not None and new_path.is_dir() and new_path.parent.resolve() == history.resolve():
        previous = ledger.previous_run(history, before=new_path.name)
    else:
        previous = ledger.previous_run(history)
        if (new_path is not None and previous is not None
                and ledger.read_manifest(previous).get("metrics_hash") == ledger.table_hash(new_table)):
            previous = ledger.previous_run(history, before=previous.name)
    if previous is not None:
        return previous
    if reference.is_file():
        return reference
    raise FileNotFoundError(f"nothing to compare with: no earlier entry in {history} and no pinned reference "
                            f"{reference} (pin one with `python -m inferlab.review.diff --pin`)")


def _label(path: Path) -> str:
    return f"run {path.name}" if path.is_dir() else str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inferlab.review.diff", description=__doc__.split("\n\n")[0])
    parser.add_argument("old", nargs="?", type=Path, help="metrics.parquet or ledger entry (default: previous run)")
    parser.add_argument("new", nargs="?", type=Path, help=f"metrics.parquet or ledger entry (default: {DEFAULT_NEW})")
    parser.add_argument("--history", type=Path, default=DEFAULT_HISTORY, help="the ledger directory")
    parser.add_argument("--reference", type=Path, default=DEFAULT_REFERENCE, help="the reference pinned in git")
    parser.add_argument("--all", action="store_true", help="list every metric, not only what needs a look")
    parser.add_argument("--markdown", type=Path, help="also write the Markdown here")
    parser.add_argument("--table", type=Path, help="also write the diff table here (.parquet or .csv)")
    parser.add_argument("--figure", type=Path, help="also write the old/new overlay PNG here")
    parser.add_argument("--pin", action="store_true",
                        help="copy NEW (default: the latest run) to the reference and exit; then commit it")
    args = parser.parse_args(argv)
    try:
        if args.pin:
            source = args.old or default_new(args.history)
            write_table(load(source), args.reference, provenance={"config_sha256": config_of(source)})
            print(f"pinned {_label(source)} as {args.reference}; commit it: git add -f {args.reference}")
            return 0
        new_path = args.new or default_new(args.history)
        new_table = load(new_path)
        old_path = args.old or default_old(new_path, new_table, args.history, args.reference)
        old_table = load(old_path)
    except (FileNotFoundError, KeyError, ledger.UnreadableRecord) as err:
        print(f"inferlab.review.diff: {err}", file=sys.stderr)
        return 2
    diff = diff_metrics(old_table, new_table)
    markdown = to_markdown(diff, _label(old_path), _label(new_path), show_all=args.all,
                           note=config_note(config_of(old_path), config_of(new_path)))
    print(markdown)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(markdown, encoding="utf-8")
    if args.table:
        if args.table.suffix == ".csv":
            diff.to_csv(args.table, index=False)
        else:
            write_table(diff, args.table)
    if args.figure:
        args.figure.parent.mkdir(parents=True, exist_ok=True)
        args.figure.write_bytes(diff_figure(old_table, new_table))
    return 0


if __name__ == "__main__":
    sys.exit(main())

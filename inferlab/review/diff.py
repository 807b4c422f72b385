"""A noise-aware diff of two runs' metrics tables: what changed, and is it real?

    python -m inferlab.review.diff [OLD] [NEW]      # Markdown to the terminal
    python -m inferlab.review.diff --pin            # refresh the reference pinned in git (tools/readme_results.py
                                                    # --pin does this and rewrites the README's results table)

OLD and NEW are metrics.parquet files or ledger entries (results/history/<run_id>/). NEW defaults
to results/metrics.parquet (else the latest ledger entry); OLD to the ledger entry before NEW,
else to the pinned reference reports/reference/metrics.parquet.

The verdicts and causes are inferlab.review.verdicts'; how they read, inferlab.review.diff_summary's.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa

from inferlab.jobs.tables import read_provenance, write_table
from inferlab.review import ledger
from inferlab.review.attribution import CONFIG, MACHINE, Cause, leaf_changes, machine_moves, render
from inferlab.review.diff_figure import diff_figure
from inferlab.review.diff_summary import to_markdown
from inferlab.review.lineage_graph import upstream_rules
from inferlab.review.metrics import MACHINE_COLUMNS, stamp_of_columns
from inferlab.review.verdicts import diff_metrics

DEFAULT_NEW = Path("results/metrics.parquet")
DEFAULT_HISTORY = Path("results/history")
DEFAULT_REFERENCE = Path("reports/reference/metrics.parquet")


# ------------------------------------------------------------------------------- for the report rule


@dataclass
class Changes:
    """What the report's "Changes since …" section shows; old_label is None when there is nothing to compare."""

    old_label: str | None
    table: pd.DataFrame | None
    markdown: str
    figure_png: bytes | None
    machine: str | None = None  # how the two runs' machines differ; None: the same (or unknown)
    config_note: str | None = None  # config_note's warning when the two runs' configurations differ
    newer_code: str | None = None  # which metrics come from code newer than the old run's (newer_code_line)


def _recorded(path: Path, key: str):
    """What a ledger entry's manifest (an unreadable one raises ledger.UnreadableRecord), else a metrics
    table's parquet provenance (results/metrics.parquet and a pinned reference carry one), records under key."""
    path = Path(path)
    if path.is_dir():
        return ledger.read_manifest(path).get(key)
    try:
        return read_provenance(path).get(key)
    except (OSError, ValueError):
        return None


def config_of(path: Path) -> str | None:
    """The config_sha256 a metrics table was made with; None if unknown."""
    return _recorded(path, "config_sha256")


def record_of(path: Path) -> dict | None:
    """The causes record (inferlab.review.lineage_graph) kept with a ledger entry or a metrics table; None if none."""
    record = _recorded(path, "causes")
    return record if isinstance(record, dict) else None


# Where the corpus file (or a reproduction's source) lives is not what a run computes: its content is in
# every job's lineage (sha256), so two runs that read the same files from two paths ran the same configuration.
LOCATION_KEYS = frozenset({"corpus_path", "reproduce", "reproduce_sha256"})


def config_note(old_config: str | None, new_config: str | None, old_record: dict | None = None,
                new_record: dict | None = None, named: int = 3) -> str | None:
    """A warning when the two runs' configurations differ, so that every 'changed' is read as
    the configuration's effect first; None when they agree or either is unknown. With both runs'
    causes records it names the settings that differ (the corpus's location does not count);
    without them it can only compare the config hashes."""
    old_settings, new_settings = ((record or {}).get("config") for record in (old_record, new_record))
    if isinstance(old_settings, dict) and isinstance(new_settings, dict):
        changes = {key: change for key, change in leaf_changes(old_settings, new_settings).items()
                   if key not in LOCATION_KEYS}
        if not changes:
            return None
        more = f" and {len(changes) - named} more" if len(changes) > named else ""
        what = render(Cause.changed(CONFIG, dict(list(changes.items())[:named])), with_kind=False) + more
    elif not old_config or not new_config or old_config == new_config:
        return None
    else:
        what = f"config sha256 {old_config[:12]} → {new_config[:12]}"
    return (f"The two runs used different configurations ({what}): differences below mix the configuration's "
            "effect with the code's.")


def newer_code_line(table: pd.DataFrame, old_record: dict | None, new_record: dict | None,
                    old_label: str) -> str | None:
    """'N metrics come from code newer than …: rule (…)': the rules whose code differs between the two records,
    and the metrics whose tables they (or a job upstream) wrote, moved or not; None when no rule's code differs."""
    old_rules, new_rules = ((record or {}).get("rules") or {} for record in (old_record, new_record))
    changed = {rule for rule in old_rules.keys() & new_rules.keys()
               if old_rules[rule].get("code_sha256") != new_rules[rule].get("code_sha256")}
    if not changed:
        return None
    sources = (new_record or {}).get("sources") or {}
    touched = {key for key in table["source"].dropna().unique()
               if key in sources and upstream_rules(new_record, [sources[key]]) & changed}
    count = int(table["source"].isin(touched).sum())
    return (f"{count} metric{'s come' if count != 1 else ' comes'} from code newer than {old_label}: "
            f"{', '.join(sorted(changed))} changed since; read their old values as the old code's.")


def runs_machine_text(old: pd.DataFrame, new: pd.DataFrame, old_record: dict | None,
                      new_record: dict | None) -> str | None:
    """How the machines of two runs differ, as every cause names it (so "the same machine" means the same
    everywhere): from their records, else from the metrics' stamps where each run names one machine."""
    moved = machine_moves((old_record or {}).get("machine"), (new_record or {}).get("machine"))
    if not moved and not (old_record and new_record):
        moved = machine_moves(_one_machine(old), _one_machine(new))
    return render(Cause.changed(MACHINE, moved), with_kind=False) if moved else None


def _one_machine(table: pd.DataFrame) -> dict | None:
    """The machine stamp a run's metrics share (the node aside), or None when they name none or several."""
    columns = [c for c in MACHINE_COLUMNS if c in table and c != "machine_node"]
    stamps = table[columns].dropna(how="all").drop_duplicates()
    if len(stamps) != 1:
        return None
    return stamp_of_columns(stamps.iloc[0])


def compare(old_path: Path, old: pd.DataFrame, new: pd.DataFrame, new_record: dict | None,
            new_label: str, new_config: str | None, show_all: bool = False, old_label: str | None = None) -> Changes:
    """The diff, its Markdown and figure for one pair of runs (the report's and the CLI's)."""
    old_record = record_of(old_path)
    old_label = old_label or _label(old_path)
    table = diff_metrics(old, new, old_record, new_record)
    machine = runs_machine_text(old, new, old_record, new_record)
    note = config_note(config_of(old_path), new_config, old_record, new_record)
    newer = newer_code_line(table, old_record, new_record, old_label)
    markdown = to_markdown(table, old_label, new_label, show_all=show_all, note=note, machine=machine, newer=newer)
    return Changes(old_label, table, markdown, diff_figure(old, new), machine, note, newer)


def changes_since_published(new: pd.DataFrame, published: dict, new_config: str | None = None,
                            new_record: dict | None = None) -> Changes:
    """A reproduction's diff: this run against the metrics of the run it imported its checkpoints from."""
    path = Path(published["metrics"])
    return compare(path, load(path), new, new_record, "this reproduction", new_config,
                   old_label=f"the published run, {published['label']}")


def changes_since(new: pd.DataFrame, history: Path, reference: Path, new_config: str | None = None,
                  new_record: dict | None = None) -> Changes:
    """The diff of this run's table against the latest ledger entry, else the pinned reference. Call it
    before this run is appended to the ledger (which records the report's hashes, so it comes last)."""
    try:
        old_path = default_old(None, new, Path(history), Path(reference))
        old = load(old_path)
    except FileNotFoundError:
        return Changes(None, None, "## Changes since …\n\nNo earlier run in the ledger and no pinned "
                       f"reference ({reference}): nothing to compare with yet.\n", None)
    except ledger.UnreadableRecord as err:
        return Changes(None, None, f"## Changes since …\n\nNo comparison: {err}. The comparison material "
                       "is optional, so this report was built without it; repair or remove that file "
                       "(re-pin the reference with `.venv/bin/python tools/readme_results.py --pin`, which also "
                       "rewrites the README's results table).\n", None)
    return compare(old_path, old, new, new_record, "this run", new_config)


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
    """The ledger entry before NEW (new_path; None for a run not yet in the ledger), else the pinned
    reference. When NEW is a file whose content equals the latest entry's, that entry is NEW itself."""
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
                            f"{reference} (pin one with `.venv/bin/python tools/readme_results.py --pin`)")


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
            write_table(load(source), args.reference,
                        provenance={"config_sha256": config_of(source), "causes": record_of(source)})
            print(f"pinned {_label(source)} as {args.reference}; commit it: git add -f {args.reference}")
            return 0
        new_path = args.new or default_new(args.history)
        new_table = load(new_path)
        old_path = args.old or default_old(new_path, new_table, args.history, args.reference)
        old_table = load(old_path)
    except (FileNotFoundError, KeyError, ledger.UnreadableRecord) as err:
        print(f"inferlab.review.diff: {err}", file=sys.stderr)
        return 2
    changes = compare(old_path, old_table, new_table, record_of(new_path), _label(new_path), config_of(new_path),
                      show_all=args.all)
    diff = changes.table.drop(columns="causes")  # the records stay in memory; a file holds their text, `cause`
    print(changes.markdown)
    for path, content in ((args.markdown, changes.markdown.encode("utf-8")), (args.figure, changes.figure_png)):
        if path:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
    if args.table and args.table.suffix == ".csv":
        diff.to_csv(args.table, index=False)
    elif args.table:
        write_table(diff, args.table)
    return 0


if __name__ == "__main__":
    sys.exit(main())

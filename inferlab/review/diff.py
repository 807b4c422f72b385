"""A noise-aware diff of two runs' metrics tables: what changed, and is it real?

The comparison the report, the bundle and `python -m inferlab.report.changes` (which lays it out)
share. OLD and NEW are metrics.parquet files or ledger entries (results/history/<run_id>/). NEW
defaults to results/metrics.parquet (else the latest ledger entry); OLD to the ledger entry before
NEW, else to the pinned reference reports/reference/metrics.parquet.

The verdicts and causes are inferlab.review.verdicts'; their counts and lines, inferlab.review.diff_summary's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa

from inferlab.jobs.tables import read_provenance
from inferlab.review import ledger
from inferlab.review.attribution import CONFIG, MACHINE, Cause, leaf_changes, machine_moves, render
from inferlab.review.diff_figure import diff_figure
from inferlab.review.lineage_graph import upstream_rules
from inferlab.review.metrics import MACHINE_COLUMNS, stamp_of_columns
from inferlab.review.verdicts import diff_metrics

DEFAULT_NEW = Path("results/metrics.parquet")
DEFAULT_HISTORY = Path("results/history")
DEFAULT_REFERENCE = Path("reports/reference/metrics.parquet")


# ------------------------------------------------------------------------------- for the report rule


@dataclass
class Changes:
    """What "Changes since …" shows; old_label and table are None when nothing is compared (`reason` says why)."""

    old_label: str | None
    table: pd.DataFrame | None
    figure_png: bytes | None = None
    machine: Cause | None = None  # how the two runs' machines differ; None: the same (or unknown)
    config_note: str | None = None  # config_note's warning when the two runs' configurations differ
    newer_code: str | None = None  # which metrics come from code newer than the old run's (newer_code_line)
    new_label: str = "this run"
    reason: str | None = None  # why nothing is compared


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


def runs_machine(old: pd.DataFrame, new: pd.DataFrame, old_record: dict | None,
                 new_record: dict | None) -> Cause | None:
    """How the machines of two runs differ, as every cause names it (so "the same machine" means the same
    everywhere): from their records, else from the metrics' stamps where each run names one machine."""
    moved = machine_moves((old_record or {}).get("machine"), (new_record or {}).get("machine"))
    if not moved and not (old_record and new_record):
        moved = machine_moves(_one_machine(old), _one_machine(new))
    return Cause.changed(MACHINE, moved) if moved else None


def _one_machine(table: pd.DataFrame) -> dict | None:
    """The machine stamp a run's metrics share (the node aside), or None when they name none or several."""
    columns = [c for c in MACHINE_COLUMNS if c in table and c != "machine_node"]
    stamps = table[columns].dropna(how="all").drop_duplicates()
    if len(stamps) != 1:
        return None
    return stamp_of_columns(stamps.iloc[0])


def compare(old_path: Path, old: pd.DataFrame, new: pd.DataFrame, new_record: dict | None,
            new_label: str, new_config: str | None, old_label: str | None = None) -> Changes:
    """The diff and its figure for one pair of runs (the report's and the CLI's)."""
    old_record = record_of(old_path)
    old_label = old_label or label_of(old_path)
    table = diff_metrics(old, new, old_record, new_record)
    return Changes(old_label, table, diff_figure(old, new), runs_machine(old, new, old_record, new_record),
                   config_note(config_of(old_path), new_config, old_record, new_record),
                   newer_code_line(table, old_record, new_record, old_label), new_label)


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
        return Changes(None, None, reason=f"No earlier run in the ledger and no pinned reference ({reference}): "
                                          "nothing to compare with yet.")
    except ledger.UnreadableRecord as err:
        return Changes(None, None, reason=f"No comparison: {err}. The comparison material is optional, so this "
                                          "report was built without it; repair or remove that file (re-pin the "
                                          "reference with `.venv/bin/python tools/readme_results.py --pin`, which "
                                          "also rewrites the README's results table).")
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


def label_of(path: Path) -> str:
    return f"run {path.name}" if path.is_dir() else str(path)

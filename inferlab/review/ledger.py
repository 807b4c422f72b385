"""The run ledger: results/history/<run_id>/ holds each completed run's metrics table and manifest.

Append-only. An entry is written into a hidden temp directory beside its final place and then
renamed in one step, so a run interrupted mid-write leaves no half entry (at worst a hidden temp
directory that every reader skips), and an existing entry is never rewritten.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from inferlab.jobs.lineage import file_sha256, git_state
from inferlab.jobs.tables import write_table

METRICS_FILE = "metrics.parquet"
MANIFEST_FILE = "manifest.json"
_TEMP_PREFIX = ".tmp-"


def table_hash(df: pd.DataFrame) -> str:
    """A content hash of a table (independent of how parquet laid out the bytes)."""
    rows = pd.util.hash_pandas_object(df.astype(str), index=False).to_numpy()
    return hashlib.sha256(rows.tobytes() + ",".join(map(str, df.columns)).encode()).hexdigest()


def new_run_id(now: datetime, commit: str | None) -> str:
    """Sortable by time: 20261129T180512Z-<commit8>."""
    return f"{now.strftime('%Y%m%dT%H%M%SZ')}-{(commit or 'unknown')[:8]}"


def append_run(history_dir: str | Path, metrics_df: pd.DataFrame, manifest: dict,
               report_files: list[str | Path], now: datetime | None = None) -> Path:
    """Adds one entry and returns its directory.

    manifest: what the caller knows (code and config hashes, machine stamp, ...); the ledger adds
    run_id, time, the git commit and dirty flag (unless given), the metrics table's content hash
    and the sha256 of every report file.
    """
    history_dir = Path(history_dir)
    now = now or datetime.now(UTC)
    missing = [str(p) for p in report_files if not Path(p).is_file()]
    if missing:
        raise FileNotFoundError(f"report files to record in the ledger do not exist: {missing}")
    full = {**git_state(), **manifest}
    run_id = manifest.get("run_id") or new_run_id(now, full.get("git_commit"))
    full.update({"run_id": run_id, "time": now.isoformat(timespec="seconds"),
                 "metrics_hash": table_hash(metrics_df),
                 "report_files": {str(p): file_sha256(p) for p in report_files}})
    final = history_dir / run_id
    if final.exists():
        raise FileExistsError(f"ledger entry {final} already exists; the ledger never rewrites an entry")
    history_dir.mkdir(parents=True, exist_ok=True)
    temp = history_dir / f"{_TEMP_PREFIX}{run_id}-{os.getpid()}"
    try:
        temp.mkdir()
        write_table(metrics_df, temp / METRICS_FILE)
        (temp / MANIFEST_FILE).write_text(json.dumps(full, ensure_ascii=False, indent=2, sort_keys=True, default=str)
                                          + "\n", encoding="utf-8")
        os.rename(temp, final)  # fails if `final` appeared meanwhile and is not empty
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    return final


class UnreadableRecord(ValueError):
    """A ledger entry, pinned reference or metrics table that exists but cannot be read: comparison
    material, so the report names the file and goes on without the comparison."""


def read_manifest(run_dir: str | Path) -> dict:
    path = Path(run_dir) / MANIFEST_FILE
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise UnreadableRecord(f"{path} could not be read ({type(err).__name__}: {err})") from err
    if not isinstance(manifest, dict):
        raise UnreadableRecord(f"{path} could not be read (a JSON {type(manifest).__name__}, not an object)")
    return manifest


def list_runs(history_dir: str | Path) -> list[Path]:
    """Complete entries, oldest first (by manifest time, then run id); temp dirs are skipped."""
    history_dir = Path(history_dir)
    if not history_dir.is_dir():
        return []
    entries = [d for d in history_dir.iterdir() if d.is_dir() and not d.name.startswith(".")
               and (d / MANIFEST_FILE).is_file() and (d / METRICS_FILE).is_file()]
    return sorted(entries, key=lambda d: (read_manifest(d).get("time", ""), d.name))


def previous_run(history_dir: str | Path, before: str | None = None) -> Path | None:
    """The entry just before run id `before` (or the latest entry when before is None); None if none."""
    runs = list_runs(history_dir)
    if before is not None:
        names = [r.name for r in runs]
        if before not in names:
            raise KeyError(f"run {before!r} is not in the ledger {history_dir} (entries: {names})")
        runs = runs[:names.index(before)]
    return runs[-1] if runs else None

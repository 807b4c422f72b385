"""Parquet I/O: every table carries the machine stamp, the job's lineage and any extra provenance in its metadata."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from inferlab.jobs.lineage import current_job_lineage

_META_KEY = b"inferlab.provenance"


def write_table(df: pd.DataFrame, path: str | Path, provenance: dict | None = None) -> None:
    """Writes atomically, so an interrupted job never leaves a readable half table.

    Inside a job started with a lineage (inferlab.jobs.job_start.start_job), the provenance gains `lineage`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pandas(df, preserve_index=False)
    if current_job_lineage() is not None:
        provenance = {**(provenance or {}), "lineage": current_job_lineage()}
    if provenance is not None:
        metadata = dict(table.schema.metadata or {})
        metadata[_META_KEY] = json.dumps(provenance, sort_keys=True, default=str).encode()
        table = table.replace_schema_metadata(metadata)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)


def read_table(path: str | Path) -> pd.DataFrame:
    """The table; one that exists but cannot be read is an error naming it and the command that rebuilds it."""
    try:
        return pd.read_parquet(path)
    except (OSError, ValueError, pa.ArrowException) as err:
        if not Path(path).exists():
            raise
        raise ValueError(f"{path}: exists but is not a readable table ({err}); rebuild it with: "
                         f"snakemake --cores all --forcerun {path}") from err


def read_provenance(path: str | Path) -> dict:
    metadata = pq.read_schema(path).metadata or {}
    raw = metadata.get(_META_KEY)
    return json.loads(raw) if raw else {}


def write_json(obj, path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, ensure_ascii=False, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_json(path: str | Path):
    """The parsed file; a truncated or garbled one is an error naming it, never a bare JSONDecodeError."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: not valid JSON ({err}); if a workflow job wrote it, rebuild it with: "
                         f"snakemake --cores all --forcerun {path}") from err

"""Loading the report's inputs: every table is optional, a missing one becomes None."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from inferlab.tables import read_json, read_provenance

# The tables the report knows, by key. The rule passes only those that are among its inputs, so
# a stale file from an earlier run with another config is never picked up.
TABLE_PATHS = {
    "kv_timings": "results/kvcache/timings.parquet",
    "kv_summary": "results/kvcache/summary.parquet",
    "kv_fit": "results/kvcache/fit.parquet",
    "kv_profile": "results/kvcache/profile.parquet",
    "roofline": "results/roofline.parquet",
    "sp_distribution": "results/sampling/distribution.parquet",
    "sp_repetition": "results/sampling/repetition.parquet",
    "sp_samples": "results/sampling/samples.parquet",
    "sp_default": "results/sampling/default.parquet",
    "spec_summary": "results/speculative/summary.parquet",
    "spec_identity": "results/speculative/greedy_identity.parquet",
    "spec_best": "results/speculative/best.parquet",
    "quant_summary": "results/quant/summary.parquet",
    "quant_choice": "results/quant/choice.parquet",
    "noise_floor": "results/noise_floor.parquet",
}
JSON_PATHS = {
    "sp_logits": "results/sampling/logits.json",
    "corpus_stats": "results/corpus/stats.json",
}


@dataclass
class ReportInputs:
    """All the report reads. tables[key] is None when the table was not produced in this workflow."""

    tables: dict[str, pd.DataFrame | None] = field(default_factory=dict)
    provenance: dict[str, dict] = field(default_factory=dict)
    json: dict[str, object] = field(default_factory=dict)
    metas: dict[str, dict] = field(default_factory=dict)  # model name -> meta.json
    loss_curves: dict[str, pd.DataFrame] = field(default_factory=dict)
    seed_reference: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)  # plain settings from the rule
    target: str = "ref_baseline"

    def table(self, key: str) -> pd.DataFrame | None:
        return self.tables.get(key)

    def has(self, *keys: str) -> bool:
        return all(self.tables.get(k) is not None or self.json.get(k) is not None for k in keys)

    def missing(self, *keys: str) -> list[str]:
        paths = {**TABLE_PATHS, **JSON_PATHS}
        return [paths.get(k, k) for k in keys if self.tables.get(k) is None and self.json.get(k) is None]


def _read_parquet(path: Path) -> tuple[pd.DataFrame | None, dict]:
    try:
        return pd.read_parquet(path), read_provenance(path)
    except Exception as err:  # an unreadable table is reported as missing, not a crash of the report
        logging.warning("cannot read %s: %s", path, err)
        return None, {}


def load_inputs(
    table_paths: dict[str, str],
    json_paths: dict[str, str],
    meta_paths: dict[str, str],
    curve_paths: dict[str, str],
    seed_reference_path: str | None,
    config: dict,
    target: str,
) -> ReportInputs:
    """Reads what exists; keys whose file does not exist stay None (shown as 'missing')."""
    data = ReportInputs(config=config, target=target)
    for key in TABLE_PATHS:
        path = table_paths.get(key)
        df, prov = (None, {})
        if path and Path(path).exists():
            df, prov = _read_parquet(Path(path))
        data.tables[key] = df
        data.provenance[key] = prov
    for key, path in json_paths.items():
        data.json[key] = read_json(path) if path and Path(path).exists() else None
    for name, path in meta_paths.items():
        if Path(path).exists():
            data.metas[name] = read_json(path)
    for name, path in curve_paths.items():
        if Path(path).exists():
            data.loss_curves[name] = pd.read_parquet(path)
    if seed_reference_path and Path(seed_reference_path).exists():
        data.seed_reference = read_json(seed_reference_path)
    return data


def pick(df: pd.DataFrame | None, *candidates: str) -> str | None:
    """First of several plausible column names present in df (tables evolve; names vary slightly)."""
    if df is None:
        return None
    for name in candidates:
        if name in df.columns:
            return name
    return None

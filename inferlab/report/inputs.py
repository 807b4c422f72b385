"""Loading the report's inputs, by name, from the {key: path} mapping the report rule passes.

A key the rule does not pass (the config did not ask for that table) stays None and shows as
"missing". A file the rule does pass but that cannot be read is an error that names the file,
the rule that writes it and the command that rebuilds it: a broken table must never turn into
a quietly "missing" section.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from inferlab.experiments import TABLES
from inferlab.jobs.tables import read_json, read_provenance


class ReportInputError(RuntimeError):
    """A report input exists but cannot be read, or lacks a column the report needs."""


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
    paths: dict[str, str] = field(default_factory=dict)  # key -> file, for messages
    producers: dict[str, str] = field(default_factory=dict)  # key -> rule that writes the file

    def table(self, key: str) -> pd.DataFrame | None:
        """The whole table, as the sections, figures and exports show it; a milestone reads `view` instead."""
        return self.tables.get(key)

    def has(self, *keys: str) -> bool:
        return all(self.tables.get(k) is not None or self.json.get(k) is not None for k in keys)

    def missing(self, *keys: str) -> list[str]:
        return [self.paths.get(k, k) for k in keys if self.tables.get(k) is None and self.json.get(k) is None]

    def view(self, key: str) -> pd.DataFrame | None:
        """The table `key` as its milestone sees it: only the columns its spec says the milestone reads, so a
        check that reads an undeclared column fails on it rather than drifting from the declaration; None when
        the table was not produced. A table lacking a column it must have is an error naming table and column."""
        df = self.tables.get(key)
        if df is None:
            return None
        declared = TABLES[key]
        absent = [c for c in declared.reads if c not in df.columns]
        if absent:
            rule = self.producers.get(key, "?")
            raise ReportInputError(
                f"table {self.paths.get(key, key)} (written by rule {rule}) lacks the column(s) {absent} that the "
                f"report reads; its producer and the report disagree. Rebuild it with `--forcerun {rule}`."
            )
        seen = {*declared.reads, *declared.reads_if_present}
        return df[[c for c in df.columns if c in seen]]

    def require(self, key: str) -> pd.DataFrame:
        """The view of a table the milestone cannot be checked without."""
        df = self.view(key)
        if df is None:
            raise ReportInputError(f"the report needs the table {self.paths.get(key, key)!r}, which was not loaded")
        return df


def _read_table(data: ReportInputs, key: str, path: str) -> None:
    data.tables[key] = pd.read_parquet(path)
    data.provenance[key] = read_provenance(path)


def load_inputs(
    paths: dict[str, str],
    producers: dict[str, str],
    meta_paths: dict[str, str],
    curve_paths: dict[str, str],
    seed_reference_path: str | None,
    config: dict,
    target: str,
) -> ReportInputs:
    """Reads every passed table (.parquet) and JSON file (.json); any unreadable one raises ReportInputError.

    paths maps the report's key (e.g. "kv_summary") to the file; producers maps it to the rule.
    """
    data = ReportInputs(config=config, target=target, paths=dict(paths), producers=dict(producers))
    for key, path in paths.items():
        rule = producers.get(key, "?")
        try:
            if str(path).endswith(".json"):
                data.json[key] = read_json(path)
            else:
                _read_table(data, key, path)
        except Exception as err:  # noqa: BLE001 - any failure to read is reported with the recovery command
            raise ReportInputError(
                f"cannot read {path} (written by rule {rule}): {type(err).__name__}: {err}. The file exists but is "
                f"damaged or from an incompatible version; rebuild it with `snakemake --cores N --forcerun {rule}`."
            ) from err
    for name, path in meta_paths.items():
        if Path(path).exists():
            data.metas[name] = read_json(path)
    for name, path in curve_paths.items():
        if Path(path).exists():
            data.loss_curves[name] = pd.read_parquet(path)
    if seed_reference_path and Path(seed_reference_path).exists():
        data.seed_reference = read_json(seed_reference_path)
    return data


def add_reference_table(data: ReportInputs, key: str, path: str, made_by: str) -> None:
    """A committed table measured outside this run (made_by: the command that remakes it), read like
    the rule outputs: the report quotes it with its own machine stamp, and the appendix holds it."""
    try:
        _read_table(data, key, path)
    except Exception as err:  # noqa: BLE001 - any failure to read is reported with the recovery command
        raise ReportInputError(f"cannot read {path}: {type(err).__name__}: {err}; remake it with {made_by}") from err
    data.paths[key] = str(path)
    data.producers[key] = made_by

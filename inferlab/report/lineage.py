"""The report's chain check: is every input the product of the code and inputs in front of it now?

Each table (Parquet provenance) and each meta.json records `lineage` (inferlab.lineage.job_lineage):
the producing rule, its code_sha256, config_sha256 and the sha256 of the files it read. An input is
  - "current" when its recorded code hash equals the producing rule's current one and every
    recorded input file that is still on disk has the recorded content;
  - "stale" when either differs: a file that was `--touch`ed after a code change, copied in by
    hand, or produced by an older checkout;
  - "no lineage" when it records none (written before lineage existed, or by hand).
A milestone with a stale input is `stale`, never `pass`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import pandas as pd

from inferlab.lineage import file_sha256

CURRENT, STALE, NO_LINEAGE = "current", "stale", "no lineage"
COLUMNS = ["path", "rule", "recorded_code_sha256", "current_code_sha256", "status", "reason"]

# Which producing rules each milestone's tables come from (keys of inferlab.report.inputs.TABLES).
MILESTONE_INPUTS = {
    "M1": ("kv_timings", "kv_summary", "kv_fit", "kv_profile", "roofline"),
    "M2": ("sp_distribution", "sp_repetition", "sp_default"),
    "M3": ("spec_summary", "spec_identity", "spec_best"),
    "M4": ("quant_summary", "quant_choice", "noise_floor"),
}


def _check(lineage: Mapping, current_code: Mapping[str, str], workdir: Path | None,
           hashes: dict[str, str]) -> tuple[str, str]:
    rule = lineage.get("rule")
    if rule not in current_code:
        return STALE, f"rule {rule!r} is not in the current workflow"
    if lineage.get("code_sha256") != current_code[rule]:
        return STALE, f"code of rule {rule} changed since this file was written"
    if workdir is not None:
        for path, recorded in (lineage.get("inputs_sha256") or {}).items():
            file = workdir / path
            if not file.is_file():
                continue
            if path not in hashes:
                hashes[path] = file_sha256(file)
            if hashes[path] != recorded:
                return STALE, f"input {path} changed since this file was written"
    return CURRENT, ""


def lineage_table(provenance: Mapping[str, Mapping], current_code: Mapping[str, str],
                  workdir: str | Path | None = None) -> pd.DataFrame:
    """One row per input: path, producing rule, recorded and current code_sha256, status, reason.

    provenance: {input key or path: its recorded provenance}, i.e. a table's
        inferlab.tables.read_provenance(path) or a checkpoint's meta.json; both hold `lineage`.
    current_code: {rule: current code_sha256}, the report rule's `code_hashes` param.
    workdir: when given, each recorded input sha256 is compared with that file there (if it exists).
    """
    workdir = Path(workdir) if workdir is not None else None
    hashes: dict[str, str] = {}
    rows = []
    for path, recorded in provenance.items():
        lineage = (recorded or {}).get("lineage")
        if not isinstance(lineage, Mapping):
            rows.append([path, None, None, None, NO_LINEAGE, "the file records no lineage"])
            continue
        status, reason = _check(lineage, current_code, workdir, hashes)
        rows.append([path, lineage.get("rule"), lineage.get("code_sha256"),
                     current_code.get(lineage.get("rule")), status, reason])
    return pd.DataFrame(rows, columns=COLUMNS)


def stale_inputs(table: pd.DataFrame, keys: Iterable[str]) -> list[str]:
    """The inputs among `keys` that the lineage table marks stale (e.g. MILESTONE_INPUTS["M4"])."""
    keys = set(keys)
    stale = table[(table["status"] == STALE) & table["path"].isin(keys)]
    return stale["path"].tolist()

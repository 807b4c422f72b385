"""The report's chain check: is every input the product of the code and inputs in front of it now?

Each table (Parquet provenance) and each meta.json records `lineage` (inferlab.jobs.lineage.job_lineage):
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

from inferlab.jobs.lineage import file_sha256

CURRENT, STALE, NO_LINEAGE = "current", "stale", "no lineage"
WEIGHTS_FILE = "model.safetensors"  # a checkpoint's weights, whose sha256 is its identity
COLUMNS = ["path", "rule", "recorded_code_sha256", "current_code_sha256", "status", "reason"]


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
        inferlab.jobs.tables.read_provenance(path) or a checkpoint's meta.json; both hold `lineage`.
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


def stamp_disagreements(provenance: Mapping[str, Mapping], metas: Mapping[str, Mapping]) -> dict[str, str]:
    """{input key: why} for every table whose model stamp names another checkpoint than its lineage
    (the weights file among its recorded inputs) or that model's own meta.json does."""
    found = {}
    for key, recorded in provenance.items():
        stamp = (recorded or {}).get("model")
        if not isinstance(stamp, Mapping) or not stamp.get("checkpoint_sha256"):
            continue
        stamped, name = str(stamp["checkpoint_sha256"]), stamp.get("model")
        witnesses = {}
        inputs = (recorded.get("lineage") or {}).get("inputs_sha256") or {}
        for path, digest in inputs.items():
            if str(path).endswith(f"models/{name}/{WEIGHTS_FILE}"):
                witnesses[f"its lineage input {path}"] = str(digest)
        meta = metas.get(name) or {}
        if meta.get("weights_sha256"):
            witnesses[f"results/models/{name}/meta.json"] = str(meta["weights_sha256"])
        for source, digest in witnesses.items():
            if digest != stamped:
                found[key] = (f"its model stamp names checkpoint {stamped[:12]} of {name}, but {source} "
                              f"says {digest[:12]}")
                break
    return found


def mark_disagreements(table: pd.DataFrame, disagreements: Mapping[str, str]) -> pd.DataFrame:
    """The lineage table with every stamp disagreement marked stale, its reason given."""
    table = table.copy()
    for key, why in disagreements.items():
        hit = table["path"] == key
        table.loc[hit, "status"] = STALE
        table.loc[hit, "reason"] = [f"{r}; {why}" if r else why for r in table.loc[hit, "reason"]]
    return table


def stale_inputs(table: pd.DataFrame, keys: Iterable[str]) -> list[str]:
    """The inputs among `keys` that the lineage table marks stale (e.g. MILESTONE_INPUTS["M4"].tables)."""
    keys = set(keys)
    stale = table[(table["status"] == STALE) & table["path"].isin(keys)]
    return stale["path"].tolist()

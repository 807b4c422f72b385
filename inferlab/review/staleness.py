"""The report's chain check: is every input the product of the code and inputs in front of it now?

Each table (Parquet provenance) and each meta.json records `lineage` (inferlab.jobs.lineage.job_lineage):
the producing rule, its code_sha256, config_sha256 and the sha256 of the files it read. An input is
  - "current" when its recorded code hash equals the producing rule's current one and every
    recorded input file that is still on disk has the recorded content;
  - "stale" when either differs, or when an input it read is itself stale, however far upstream
    (a summary reads no quantisation code, yet a `--touch`ed scheme table made by old quantisation
    code makes it stale): a file that was `--touch`ed after a code change, copied in by hand, or
    produced by an older checkout;
  - "no lineage" when it records none (written before lineage existed, or by hand).
A milestone with a stale input is `stale`, never `pass`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import pandas as pd

from inferlab.jobs.lineage import file_sha256
from inferlab.review.causes import lineage_key, recorded_provenance

CURRENT, STALE, NO_LINEAGE = "current", "stale", "no lineage"
WEIGHTS_FILE = "model.safetensors"  # a checkpoint's weights, whose sha256 is its identity
COLUMNS = ["path", "rule", "recorded_code_sha256", "current_code_sha256", "status", "reason"]


def _recorded_lineage(path: str, workdir: Path) -> Mapping | None:
    """The lineage recorded for one input (a checkpoint's weights by the meta.json beside them);
    None for a file without one (the corpus) or one that cannot be read."""
    recorded = recorded_provenance(workdir / lineage_key(path))
    lineage = (recorded or {}).get("lineage")
    return lineage if isinstance(lineage, Mapping) else None


class _Chain:
    """The check over one report's inputs and everything upstream of them, each file read once."""

    def __init__(self, current_code: Mapping[str, str], workdir: Path | None):
        self.current_code, self.workdir = current_code, workdir
        self.hashes: dict[str, str] = {}
        self.upstream: dict[str, tuple[str, str]] = {}

    def check(self, lineage: Mapping) -> tuple[str, str]:
        rule = lineage.get("rule")
        if rule not in self.current_code:
            return STALE, f"rule {rule!r} is not in the current workflow"
        if lineage.get("code_sha256") != self.current_code[rule]:
            return STALE, f"code of rule {rule} changed since this file was written"
        if self.workdir is None:
            return CURRENT, ""
        for path, recorded in (lineage.get("inputs_sha256") or {}).items():
            file = self.workdir / path
            if not file.is_file():
                continue
            if path not in self.hashes:
                self.hashes[path] = file_sha256(file)
            if self.hashes[path] != recorded:
                return STALE, f"input {path} changed since this file was written"
            status, reason = self.check_upstream(path)
            if status == STALE:
                return STALE, f"input {path} is stale: {reason}"
        return CURRENT, ""

    def check_upstream(self, path: str) -> tuple[str, str]:
        if path not in self.upstream:
            self.upstream[path] = CURRENT, ""  # a DAG has no cycles; this only guards the recursion
            lineage = _recorded_lineage(path, self.workdir)
            self.upstream[path] = self.check(lineage) if lineage is not None else (CURRENT, "")
        return self.upstream[path]


def lineage_table(provenance: Mapping[str, Mapping], current_code: Mapping[str, str],
                  workdir: str | Path | None = None) -> pd.DataFrame:
    """One row per input: path, producing rule, recorded and current code_sha256, status, reason.

    provenance: {input key or path: its recorded provenance}, i.e. a table's
        inferlab.jobs.tables.read_provenance(path) or a checkpoint's meta.json; both hold `lineage`.
    current_code: {rule: current code_sha256}, the report rule's `code_hashes` param.
    workdir: when given, each recorded input sha256 is compared with that file there (if it exists),
        and each such input's own lineage is checked the same way, up to the corpus.
    """
    chain = _Chain(current_code, Path(workdir) if workdir is not None else None)
    rows = []
    for path, recorded in provenance.items():
        lineage = (recorded or {}).get("lineage")
        if not isinstance(lineage, Mapping):
            rows.append([path, None, None, None, NO_LINEAGE, "the file records no lineage"])
            continue
        status, reason = chain.check(lineage)
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

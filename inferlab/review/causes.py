"""The causes record: everything a later diff needs to say *why* a number moved.

Built by the report rule from the lineage every table and checkpoint carries
(inferlab.jobs.lineage.job_lineage), walked upstream from the report's inputs through the files
each job read. Stored in the ledger entry's manifest (`lineage`) and in results/metrics.parquet's
provenance, so a pinned reference keeps it too.

    {"format": 1,
     "sources":  {report input key: file},             # "models/<name>" for a checkpoint's meta.json
     "files":    {file: {rule, code_sha256, config_sha256, settings, inputs_sha256, machine}},
     "rules":    {rule: {"code_sha256", "script", "modules": {module: AST hash}, "versions"}},
     "config":   the run's resolved config,
     "machine":  the report job's machine stamp (with its hardware fingerprint),
     "calibration": {"bandwidth_GB_per_s", "peak_GFLOP_per_s"} from this run's roofline probe,
     "versions": {"python", "torch", "numpy"}}

A rule's modules are read from the checkout only when their hash reproduces the code_sha256 the
tables recorded; otherwise the rule records `"modules": null` (the code that made the numbers is
no longer on disk, so it cannot be named module by module).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from inferlab.jobs.lineage import canonical_sha256, code_identity, stack_versions
from inferlab.jobs.tables import read_provenance

FORMAT = 1
WEIGHTS_SUFFIX = "model.safetensors"  # a checkpoint's weights; its lineage lives in meta.json beside it
META_FILE = "meta.json"


def lineage_key(path: str) -> str:
    """The file that holds a file's lineage: a checkpoint's weights are recorded by the meta.json beside them."""
    path = str(path)
    return str(PurePosixPath(path).with_name(META_FILE)) if path.endswith(WEIGHTS_SUFFIX) else path


def recorded_provenance(path: Path) -> dict | None:
    """The provenance a file records: a table's parquet metadata or a JSON file's top level (a
    checkpoint's meta.json). None for a file that records none (the corpus)."""
    if not path.is_file():
        return None
    try:
        if path.suffix == ".parquet":
            return read_provenance(path)
        if path.suffix == ".json":
            loaded = json.loads(path.read_text(encoding="utf-8"))
            return loaded if isinstance(loaded, dict) else None
    except (OSError, ValueError):
        return None
    return None


def _file_entry(provenance: Mapping) -> dict | None:
    lineage = provenance.get("lineage")
    if not isinstance(lineage, Mapping):
        return None
    machine = provenance.get("machine")
    return {"rule": lineage.get("rule"), "code_sha256": lineage.get("code_sha256"),
            "config_sha256": lineage.get("config_sha256"), "settings": lineage.get("settings"),
            "inputs_sha256": dict(lineage.get("inputs_sha256") or {}),
            "machine": dict(machine) if isinstance(machine, Mapping) else None,
            "weights_sha256": provenance.get("weights_sha256")}  # a checkpoint's meta.json only


def walk_files(sources: Mapping[str, str], workdir: Path) -> dict[str, dict]:
    """{file: its lineage entry} for every source and every file upstream of one, as far as lineage reaches."""
    files: dict[str, dict] = {}
    pending = list(dict.fromkeys(lineage_key(p) for p in sources.values()))
    seen = set()
    while pending:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        provenance = recorded_provenance(workdir / path)
        entry = _file_entry(provenance) if provenance else None
        if entry is None:
            continue
        files[path] = entry
        pending.extend(lineage_key(p) for p in entry["inputs_sha256"] if lineage_key(p) not in seen)
    return files


def rule_identities(files: Mapping[str, dict], scripts: Mapping[str, str], root: Path) -> dict[str, dict]:
    """{rule: its code identity} for every rule that wrote a file, module by module where the
    checkout still holds the code the file recorded."""
    rules = {}
    for rule, recorded in sorted({(e["rule"], e["code_sha256"]) for e in files.values() if e["rule"]}):
        script = root / scripts[rule] if rule in scripts else None
        entry = {"code_sha256": recorded, "script": None, "modules": None, "versions": None}
        if script is not None and script.is_file():
            for compute in (True, False):
                identity = code_identity(script, root, compute)
                if canonical_sha256(identity) == recorded:
                    entry.update(script=identity["script"], modules=identity["modules"],
                                 versions=identity.get("versions"))
                    break
        rules[rule] = entry
    return rules


def causes_record(sources: Mapping[str, str], scripts: Mapping[str, str], root: str | Path, config: Mapping,
                  machine: Mapping, calibration: Mapping | None, workdir: str | Path = ".") -> dict:
    """The record described in the module docstring.

    sources: {report input key: file}; scripts: {rule: its script, relative to root}; root: the checkout
    holding `inferlab/`; calibration: this run's probe rates (None when it ran no probe).
    """
    files = walk_files(sources, Path(workdir))
    return {"format": FORMAT, "sources": {k: str(v) for k, v in sources.items()}, "files": files,
            "rules": rule_identities(files, scripts, Path(root)),
            "config": json.loads(json.dumps(config, ensure_ascii=False, default=str)),
            "machine": dict(machine), "calibration": dict(calibration) if calibration else None,
            "versions": stack_versions()}

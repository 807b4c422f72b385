"""The recorded lineage of a run as one graph, read once: for every file, the job that wrote it.

Every table (Parquet provenance) and checkpoint meta.json records `lineage` (inferlab.jobs.lineage.job_lineage):
the rule, its code_sha256, config_sha256, settings and the sha256 of each file it read. The report's chain
check (lineage_table), the record a run keeps for a later diff (causes_record) and the diff's causes
(inferlab.review.attribution) are queries on that graph. The chain check calls an input "stale" when its
recorded code hash is not the producing rule's current one, an input it read that is still on disk has
other content, or such an input is itself stale, however far upstream (a `--touch`ed table made by old
code, a file copied in by hand); also when its model stamp names another checkpoint. A milestone with a
stale input is `stale`, never `pass`.

The causes record, kept in the ledger entry and in results/metrics.parquet, is the graph with what explains it:

    {"format": 1,
     "sources":  {report input key: file},             # "models/<name>" for a checkpoint's meta.json
     "files":    {file: {rule, code_sha256, config_sha256, settings, inputs_sha256, machine}},
     "rules":    {rule: {"code_sha256", "script", "modules": {module: AST hash}, "versions"}},
     "config":   the run's resolved config,
     "machine":  the report job's machine stamp (with its hardware fingerprint),
     "calibration": {"bandwidth_GB_per_s", "peak_GFLOP_per_s"} from this run's roofline probe,
     "versions": {"python", "torch", "numpy"}}

A rule's modules are read from the checkout only when their hash reproduces the code_sha256 the
tables recorded; otherwise the rule records `"modules": null`: the code that made the numbers is
no longer on disk.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath

import pandas as pd

from inferlab.jobs.lineage import canonical_sha256, code_identity, file_sha256, stack_versions
from inferlab.jobs.tables import read_provenance
from inferlab.jobs.template_lineage import rule_code_sha256

CURRENT, STALE, NO_LINEAGE = "current", "stale", "no lineage"
COLUMNS = ["path", "rule", "recorded_code_sha256", "current_code_sha256", "status", "reason"]
WEIGHTS_FILE = "model.safetensors"  # a checkpoint's weights; its lineage lives in meta.json beside it
META_FILE = "meta.json"


def lineage_key(path: str) -> str:
    """The file that holds a file's lineage: a checkpoint's weights are recorded by the meta.json beside them."""
    path = str(path)
    return str(PurePosixPath(path).with_name(META_FILE)) if path.endswith(WEIGHTS_FILE) else path


def _job(file: Path) -> dict | None:
    """The graph's node for one file: the job that wrote it, as its provenance (a table's parquet
    metadata, a checkpoint's meta.json) records it; None without lineage (the corpus) or file."""
    try:
        recorded = (read_provenance(file) if file.suffix == ".parquet" else
                    json.loads(file.read_text(encoding="utf-8")) if file.suffix == ".json" else None)
    except (OSError, ValueError):
        return None
    lineage = recorded.get("lineage") if isinstance(recorded, dict) else None
    if not isinstance(lineage, Mapping):
        return None
    machine = recorded.get("machine")
    return {"rule": lineage.get("rule"), "code_sha256": lineage.get("code_sha256"),
            "config_sha256": lineage.get("config_sha256"), "settings": lineage.get("settings"),
            "inputs_sha256": dict(lineage.get("inputs_sha256") or {}),
            "machine": dict(machine) if isinstance(machine, Mapping) else None,
            "weights_sha256": recorded.get("weights_sha256")}  # a checkpoint's meta.json only


class LineageGraph:
    """{file: the job that wrote it}, for a run's inputs and everything upstream of them."""

    def __init__(self, files: Mapping[str, Mapping]):
        self.files = dict(files)

    @classmethod
    def read(cls, paths: Iterable[str], workdir: str | Path = ".") -> LineageGraph:
        """The one walk: every file in `paths` and upstream of one, each read once from workdir."""
        files: dict[str, dict] = {}
        pending, seen = [lineage_key(p) for p in paths], set()
        while pending:
            path = pending.pop()
            job = _job(Path(workdir) / path) if path not in seen else None
            seen.add(path)
            if job is not None:
                files[path] = job
                pending.extend(lineage_key(p) for p in job["inputs_sha256"])
        return cls(files)

    @classmethod
    def of_record(cls, record: Mapping | None) -> LineageGraph:
        """The graph a causes record kept (its `files`)."""
        return cls((record or {}).get("files") or {})

    def job(self, path: str) -> Mapping | None:
        """The job that wrote `path` (a checkpoint's weights: its meta.json's); None beyond lineage."""
        return self.files.get(lineage_key(path))


def rule_identities(graph: LineageGraph, scripts: Mapping[str, str], root: Path) -> dict[str, dict]:
    """{rule: its code identity} for every rule that wrote a file, module by module where the
    checkout still holds the code the file recorded."""
    rules = {}
    for rule, recorded in sorted({(j["rule"], j["code_sha256"]) for j in graph.files.values() if j["rule"]}):
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


def upstream_rules(record: Mapping | None, paths: Iterable[str]) -> set[str]:
    """Every rule whose job wrote one of `paths`, or a file upstream of one, in a causes record's graph."""
    graph, rules, seen = LineageGraph.of_record(record), set(), set()
    pending = [lineage_key(p) for p in paths]
    while pending:
        path = pending.pop()
        job = graph.job(path) if path not in seen else None
        seen.add(path)
        if job is not None:
            rules.add(job["rule"])
            pending.extend(lineage_key(p) for p in job.get("inputs_sha256") or {})
    return rules


def rules_with_newer_code(record: Mapping | None, root: str | Path) -> dict[str, str]:
    """{rule: what changed} for every rule of a causes record whose code is no longer the checkout's at root:
    its script (found among root/scripts by its recorded hash) or a module it imports."""
    root = Path(root)
    scripts = {code_identity(path, root, compute=False)["script"]: path
               for path in sorted((root / "scripts").glob("*.py"))}
    newer = {}
    for rule, entry in ((record or {}).get("rules") or {}).items():
        script = scripts.get(entry.get("script"))
        if entry.get("script") is None:
            newer[rule] = "its code was no longer on disk when the run was recorded"
        elif script is None:
            newer[rule] = "its script changed"
        elif rule_code_sha256(script, root, compute=entry.get("versions") is not None) != entry.get("code_sha256"):
            modules = code_identity(script, root, compute=False)["modules"]
            moved = sorted(m for m in {*modules, *(entry.get("modules") or {})}
                           if modules.get(m) != (entry.get("modules") or {}).get(m))
            newer[rule] = f"{', '.join(moved)} changed" if moved else "its libraries or templates changed"
    return newer


def causes_record(sources: Mapping[str, str], scripts: Mapping[str, str], root: str | Path, config: Mapping,
                  machine: Mapping, calibration: Mapping | None) -> dict:
    """The record described in the module docstring, read from the working directory. scripts: {rule: its
    script, relative to root}, the checkout holding `inferlab/`; calibration: None when the run ran no probe."""
    graph = LineageGraph.read(sources.values())
    return {"format": 1, "sources": {k: str(v) for k, v in sources.items()}, "files": graph.files,
            "rules": rule_identities(graph, scripts, Path(root)),
            "config": json.loads(json.dumps(config, ensure_ascii=False, default=str)),
            "machine": dict(machine), "calibration": dict(calibration) if calibration else None,
            "versions": stack_versions()}


def _stale_reason(graph: LineageGraph | None, current_code: Mapping[str, str], workdir: Path | None):
    """Why the job that recorded a lineage is stale ('' when current), as a query on the lineage graph:
    its rule's code, then each input still in workdir (hashed once) and that input's own job (judged once)."""
    sha256 = functools.cache(lambda path: file_sha256(workdir / path))
    upstream: dict[str, str] = {}

    def reason(lineage: Mapping) -> str:
        rule = lineage.get("rule")
        if rule not in current_code:
            return f"rule {rule!r} is not in the current workflow"
        if lineage.get("code_sha256") != current_code[rule]:
            return f"code of rule {rule} changed since this file was written"
        for path, recorded in (lineage.get("inputs_sha256") or {}).items() if workdir is not None else ():
            if not (workdir / path).is_file():
                continue
            if sha256(path) != recorded:
                return f"input {path} changed since this file was written"
            if path not in upstream:
                upstream[path] = ""  # a DAG has no cycles; this only guards the recursion
                job = graph.job(path)
                upstream[path] = reason(job) if job is not None else ""
            if upstream[path]:
                return f"input {path} is stale: {upstream[path]}"
        return ""
    return reason


def lineage_table(provenance: Mapping[str, Mapping], current_code: Mapping[str, str],
                  workdir: str | Path | None = None, graph: LineageGraph | None = None,
                  metas: Mapping[str, Mapping] | None = None) -> pd.DataFrame:
    """The chain check (COLUMNS), one row per input.

    provenance: {input key or path: its recorded provenance} (a table's or a checkpoint meta.json's);
    current_code: {rule: current code_sha256}; workdir: when given, each recorded input is checked against
    the file there (if it exists) and that file's own job in turn, on `graph` (read from workdir unless given);
    metas: {model: its meta.json}; when given, an input whose model stamp names another checkpoint is stale.
    """
    lineages = {key: (recorded or {}).get("lineage") for key, recorded in provenance.items()}
    if graph is None and workdir is not None:
        graph = LineageGraph.read([path for lineage in lineages.values() if isinstance(lineage, Mapping)
                                   for path in lineage.get("inputs_sha256") or {}], workdir)
    reason = _stale_reason(graph, current_code, Path(workdir) if workdir is not None else None)
    disagreements = stamp_disagreements(provenance, metas) if metas is not None else {}
    rows = []
    for key, lineage in lineages.items():
        if isinstance(lineage, Mapping):
            why, rule = reason(lineage), lineage.get("rule")
            row = [key, rule, lineage.get("code_sha256"), current_code.get(rule), STALE if why else CURRENT, why]
        else:
            row = [key, None, None, None, NO_LINEAGE, "the file records no lineage"]
        if key in disagreements:  # stale whatever its lineage says: its numbers are another model's
            row[4:] = [STALE, f"{row[5]}; {disagreements[key]}" if row[5] else disagreements[key]]
        rows.append(row)
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
        inputs = (recorded.get("lineage") or {}).get("inputs_sha256") or {}
        witnesses = {f"its lineage input {path}": str(digest) for path, digest in inputs.items()
                     if str(path).endswith(f"models/{name}/{WEIGHTS_FILE}")}
        if (metas.get(name) or {}).get("weights_sha256"):
            witnesses[f"results/models/{name}/meta.json"] = str(metas[name]["weights_sha256"])
        differing = [(source, digest) for source, digest in witnesses.items() if digest != stamped]
        if differing:
            source, digest = differing[0]
            found[key] = f"its model stamp names checkpoint {stamped[:12]} of {name}, but {source} says {digest[:12]}"
    return found


def stale_inputs(table: pd.DataFrame, keys: Iterable[str]) -> list[str]:
    """The inputs among `keys` that the lineage table marks stale (e.g. MILESTONES["M4"].inputs)."""
    return table.loc[(table["status"] == STALE) & table["path"].isin(set(keys)), "path"].tolist()

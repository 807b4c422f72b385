"""The review layer of the report: the chain check (stale inputs), the milestone cards, "Changes since …".

build.py calls these after the milestone checks and before rendering:
1. lineage_of_inputs: the lineage table of every input table, JSON file and checkpoint meta.json
   against the current code hashes (inferlab.review.lineage_graph);
2. mark_stale: a milestone with a stale input becomes `stale` (never pass), and its stamps name
   the code hash that made its numbers;
3. opening_blocks: a warning for every unexplained change, one card per milestone (status,
   headline, stamps in one line, what changed since the reference and why), then the
   "Changes since …" section, grouped by cause, with the old/new overlay figure.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from inferlab.experiments import MILESTONES
from inferlab.report.changes import changes_blocks, unexplained_warnings
from inferlab.report.inputs import ReportInputs
from inferlab.report.milestones.common import MISSING, Milestone, Stale
from inferlab.report.stamp_reader import stamp_line
from inferlab.review.attribution import UNEXPLAINED
from inferlab.review.diff import Changes
from inferlab.review.diff_summary import milestone_change_lines, reproducibility
from inferlab.review.lineage_graph import STALE, LineageGraph, lineage_table, stale_inputs
from inferlab.review.metrics import SUMMATION_RTOL
from inferlab.review.numbers import fmt
from inferlab.review.verdicts import NOT_COMPARABLE

STALE_STATUS = "stale"
_CHECKPOINT = "checkpoint "  # key prefix of a model's meta.json in the lineage table


def input_provenance(data: ReportInputs) -> dict[str, dict]:
    """{input key: its recorded provenance}: tables, JSON files that record lineage, checkpoints."""
    provenance = {key: prov for key, prov in data.provenance.items() if data.tables.get(key) is not None}
    for key, obj in data.json.items():
        if isinstance(obj, Mapping) and "lineage" in obj:
            provenance[key] = obj
    for name, meta in data.metas.items():
        provenance[f"{_CHECKPOINT}{name}"] = meta
    return provenance


def lineage_of_inputs(data: ReportInputs, code_hashes: Mapping[str, str], workdir: str | None = ".",
                      graph: LineageGraph | None = None) -> pd.DataFrame:
    """The lineage table (path = the input's key), with the file each key stands for. graph: the lineage
    upstream of the inputs when this run's causes record already read it; else it is read from workdir."""
    provenance = input_provenance(data)
    table = lineage_table(provenance, code_hashes, workdir=workdir, graph=graph, metas=data.metas)
    table.insert(1, "file", [data.paths.get(key, key) for key in table["path"]])
    return table


def mark_stale(milestones: list[Milestone], lineage: pd.DataFrame) -> list[Milestone]:
    """A milestone whose tables (or any checkpoint) are stale is `stale`; its stamps get the code hashes.

    Applied after the checks: a stale number can neither pass nor fail, it must be rebuilt first.
    """
    checkpoints = [p for p in lineage["path"] if str(p).startswith(_CHECKPOINT)]
    for m in milestones:
        tables = MILESTONES[m.id].inputs
        keys = (*tables, *checkpoints)
        rows = lineage[lineage["path"].isin(tables) & lineage["rule"].notna()]
        codes = dict.fromkeys(f"{r.rule} {str(r.recorded_code_sha256)[:12]}" for r in rows.itertuples())
        if codes:
            m.stamps["code_sha256"] = ", ".join(codes)
        stale = stale_inputs(lineage, keys)
        if stale and m.status != MISSING:
            m.stale = Stale(dict(lineage.set_index("path").loc[stale, "reason"]), checked=m.status)
            m.status = STALE_STATUS
    return milestones


def _kinds(rows: pd.DataFrame) -> str:
    return ", ".join(sorted(rows["experiment"].unique()))


def reviewer_blocks(run_id: str | None, machine: dict, metrics: pd.DataFrame, causes: dict | None) -> list[tuple]:
    """"For reviewers": which run this is, the two commands that check it, and what it can claim where."""
    commit = str(machine.get("git_commit") or "unknown")
    dirty = {True: " with uncommitted changes", False: "", None: ""}[machine.get("git_dirty")]
    deterministic = metrics[~metrics["timing"].astype(bool) & (metrics["experiment"] != "milestones")]
    timings = metrics[metrics["timing"].astype(bool)]
    probe = (causes or {}).get("calibration") or {}
    rates = (f", probe {fmt(probe['bandwidth_GB_per_s'], ' GB/s')} and {fmt(probe['peak_GFLOP_per_s'], ' GFLOP/s')}"
             if {"bandwidth_GB_per_s", "peak_GFLOP_per_s"} <= probe.keys() else "")
    entry = f"results/history/{run_id}" if run_id else "results/metrics.parquet"
    return [
        ("h2", "For reviewers"),
        ("p", f"Run {run_id or '(not recorded in a ledger)'}, code commit {commit[:12]}{dirty}."),
        ("p", "Verify the bundle: unzip -d /tmp/c13 reports/c13-bundle.zip && "
              "(cd /tmp/c13 && sha256sum -c MANIFEST.sha256)"),
        ("p", "Re-derive every number from it without training (it carries this run's checkpoints): "
              "./run.sh --config reproduce=c13-bundle.zip reproduce_sha256=SHA256, where SHA256 is the bundle's own, "
              "published beside it in reports/c13-bundle.zip.sha256 (a page inside the bundle cannot hold it)."),
        ("p", f"Diff against another run: python -m inferlab.report.changes OTHER {entry} (OTHER: a ledger entry or "
              "a metrics.parquet); its cause column says why each number moved."),
        ("p", f"Holds everywhere: the {len(deterministic)} deterministic metrics ({_kinds(deterministic)}) are "
              "identical on a machine with the same CPU model and kernel flags, and agree within their noise "
              "across CPU families, whose bf16 kernels differ."),
        ("p", f"Holds on this machine only: the {len(timings)} timings ({_kinds(timings)}), measured on "
              f"{machine.get('cpu_model')} with kernel flags {machine.get('cpu_kernel_flags') or 'unknown'}, "
              f"fingerprint {machine.get('fingerprint') or 'unknown'}{rates}."),
    ]


def trained_on(meta: Mapping | None) -> str:
    """Where a checkpoint was trained, from its meta.json's machine stamp."""
    machine = (meta or {}).get("machine") or {}
    flags = f" ({machine['cpu_kernel_flags']})" if machine.get("cpu_kernel_flags") else ""
    return (f"{machine.get('cpu_model', 'an unrecorded machine')}{flags}, torch {machine.get('torch_version')}, "
            f"git {str(machine.get('git_commit'))[:12]}")


def reproduction_block(changes: Changes, published: Mapping, target_meta: Mapping | None) -> tuple[str, str]:
    """A reproduction's verdict in one line: which run it imported, and number by number whether it agrees;
    a warning when a deterministic metric differs."""
    diff = changes.table
    r = reproducibility(diff)
    differ = diff[diff["deterministic_differs"]]
    by_cause = differ["cause_kind"].fillna(UNEXPLAINED).value_counts()
    causes = ", ".join(f"{n} {kind}" for kind, n in by_cause.items())
    incomparable = diff[(diff["verdict"] == NOT_COMPARABLE) & diff["timing"]]
    text = (f"Reproduction of {published['label']}: its checkpoints were imported, not trained (trained on "
            f"{trained_on(target_meta)}). {r['identical']} of {r['total']} deterministic metrics are identical to "
            f"the published run's; {r['within_tolerance']} agree within {fmt(SUMMATION_RTOL)} relative (float "
            f"summation order on another CPU); {r['differ']} differ{f' ({causes})' if causes else ''}."
            + (f" {len(incomparable)} timing metrics are not comparable (another machine or its load; "
               "“Changes since …” says which)." if len(incomparable) else ""))
    return ("warning" if r["differ"] else "p", text)


def opening_blocks(milestones: list[Milestone], changes: Changes, reviewers: list[tuple] | None = None) -> list[tuple]:
    """The first screen: any unexplained change, one card per milestone, "For reviewers", then
    "Changes since …" by cause (inferlab.report.changes: the same blocks as the bundle's changes.md)."""
    lines = milestone_change_lines(changes.table, changes.machine) if changes.table is not None else {}
    since = f"Since {changes.old_label}" if changes.old_label else "Since the reference"
    if changes.config_note:
        since += " (a run of another configuration)"
    blocks: list[tuple] = unexplained_warnings(changes.table)
    blocks += [("card", m, m.headline, stamp_line(m.stamps), f"{since}: {lines.get(m.id, 'nothing to compare yet')}")
               for m in milestones]
    return blocks + (reviewers or []) + changes_blocks(changes)


def lineage_blocks(lineage: pd.DataFrame | None) -> list[tuple]:
    """The provenance section's chain check: per input, recorded vs current code hash and status."""
    if lineage is None:
        return [("p", "Code lineage: not checked (no current code hashes were passed to the report).")]
    stale = int((lineage["status"] == STALE).sum())
    shown = lineage.assign(recorded_code_sha256=lineage["recorded_code_sha256"].str[:16],
                           current_code_sha256=lineage["current_code_sha256"].str[:16])
    return [
        ("p", f"Code lineage of the inputs: {len(lineage)} inputs, {stale} stale. An input is stale when the code "
              "of the rule that wrote it changed since, or a file it read changed (a --touch after a code edit, a "
              "file copied in by hand, an older checkout); its milestone is then 'stale', never 'pass'."),
        ("table", shown, "Recorded vs current code hash per input (first 16 hex digits)"),
    ]

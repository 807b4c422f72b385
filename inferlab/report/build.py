"""Writing every report output from the loaded inputs (called by scripts/report_build.py and tests)."""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from inferlab.experiments import CHANGES_FIGURE, MILESTONES
from inferlab.jobs.lineage import canonical_sha256
from inferlab.jobs.machine import format_machine, machine_stamp
from inferlab.jobs.tables import write_json, write_table
from inferlab.report import exports, opening
from inferlab.report.assemble import build_document
from inferlab.report.changes import changes_markdown
from inferlab.report.inputs import ReportInputs
from inferlab.report.milestones.checklist import check_all
from inferlab.report.milestones.common import Milestone
from inferlab.report.page_html import html_page
from inferlab.report.page_markdown import markdown_page, write_appendix
from inferlab.report.stamp_reader import milestones_table, stamp_lines
from inferlab.report.workbench import grid_records, workbench_html
from inferlab.review import runinfo
from inferlab.review.diff import Changes, changes_since, changes_since_published
from inferlab.review.diff_figure import diff_figure
from inferlab.review.lineage_graph import LineageGraph
from inferlab.review.metrics import metrics_table
from inferlab.review.recording import ReviewPaths, bundle_and_record, unique_run_id


@dataclass
class ReportPaths:
    milestones: str
    html: str
    markdown: str
    inference_json: str
    precomputed_json: str
    workbench: str
    figures: str  # the folder of the PNGs, <stem>.png each (next to the Markdown: figures/)
    appendix: str | None = None  # the folder of the appendix tables as CSV; None: appendix/ next to the Markdown
    review: ReviewPaths | None = None  # metrics, bundle, ledger; None: none of them (unit tests)


def run_information(config: dict, benchmark_dir: str, input_paths: list[str], machine: dict) -> dict:
    start = runinfo.run_start()
    bench = runinfo.benchmark_table(benchmark_dir) if Path(benchmark_dir).exists() else None
    outputs = runinfo.classify_outputs([str(p) for p in input_paths], start)
    return {
        "config_sha256": canonical_sha256(config),
        "config": config,  # written into the reviewer bundle
        "git_commit": machine.get("git_commit"),
        "git_dirty": machine.get("git_dirty"),
        "machine": format_machine(machine),
        "generated_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "run_start": dt.datetime.fromtimestamp(start, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if start else None,
        "benchmarks": bench,
        "outputs": outputs,
    }


def run_metrics(data: ReportInputs, milestones: list[Milestone]) -> pd.DataFrame:
    """results/metrics.parquet: the headline numbers, milestone statuses and each experiment's stamps."""
    by_id = {m.id: m for m in milestones}
    experiments = {exp: by_id[mid].stamps for mid, spec in MILESTONES.items() if mid in by_id
                   for exp in spec.reviewed}
    stamps = {**milestones[0].stamps, "experiments": experiments}
    return metrics_table(data.tables, milestones_table(milestones), stamps, data.metas)


def _changes(metrics: pd.DataFrame, review: ReviewPaths | None, config_sha256: str | None,
             causes: dict | None) -> Changes:
    """What this run is compared with: a reproduction with the run it imported, else the latest ledger entry
    or the pinned reference."""
    if review is None:
        return Changes(None, None, reason="Not compared: this report was written without a ledger.")
    if review.published:
        return changes_since_published(metrics, review.published, config_sha256, causes)
    return changes_since(metrics, Path(review.history), Path(review.reference), new_config=config_sha256,
                         new_record=causes)


def write_report(data: ReportInputs, paths: ReportPaths, run: dict, machine: dict | None = None,
                 code_hashes: dict[str, str] | None = None, workdir: str | None = ".",
                 causes: dict | None = None) -> list[Milestone]:
    """Every report output; with paths.review also metrics.parquet, the bundle and a ledger entry.

    1. the milestone checks; 2. the chain check: stale inputs make their milestones `stale`
    (only when code_hashes, the current code hash per rule, is given); 3. this run's metrics and
    the diff against the previous ledger entry / pinned reference; 4. the documents and exports;
    5. the bundle, then the ledger entry (last: it records the hashes of everything above).
    causes: this run's causes record (inferlab.review.lineage_graph), kept in the ledger so that a later
    diff can name why a number moved.
    """
    machine = machine or machine_stamp("cpu")
    milestones = check_all(data, machine)
    graph = LineageGraph.of_record(causes) if causes else None  # the lineage, read once for the record
    lineage = opening.lineage_of_inputs(data, code_hashes, workdir, graph) if code_hashes is not None else None
    if lineage is not None:
        opening.mark_stale(milestones, lineage)
    published = paths.review.published if paths.review else None
    for m in milestones if published else ():
        m.stamps["imported"] = f"{published['label']}, trained on {opening.trained_on(data.metas.get(data.target))}"
    metrics = run_metrics(data, milestones)
    changes = _changes(metrics, paths.review, run.get("config_sha256"), causes)
    run_id = (unique_run_id(paths.review.history, dt.datetime.now(dt.UTC), machine.get("git_commit"))
              if paths.review else None)
    reviewers = opening.reviewer_blocks(run_id, machine, metrics, causes)
    reproduced = [opening.reproduction_block(changes, published, data.metas.get(data.target))] if published else []
    blocks = {"opening": reproduced + opening.opening_blocks(milestones, changes, reviewers),
              "provenance": opening.lineage_blocks(lineage)}
    doc = build_document(data, milestones, run, blocks)
    doc.figures[CHANGES_FIGURE] = changes.figure_png or diff_figure(metrics.iloc[0:0], metrics)
    Path(paths.figures).mkdir(parents=True, exist_ok=True)
    for stem, png in doc.figures.items():
        (Path(paths.figures) / f"{stem}.png").write_bytes(png)
    md_dir = Path(paths.markdown).parent
    fig_rel = Path(paths.figures).resolve().relative_to(md_dir.resolve())
    appendix_dir = Path(paths.appendix) if paths.appendix else md_dir / "appendix"
    write_appendix(doc, appendix_dir)
    Path(paths.html).parent.mkdir(parents=True, exist_ok=True)
    Path(paths.html).write_text(html_page(doc), encoding="utf-8")
    Path(paths.markdown).write_text(markdown_page(doc, str(fig_rel), os.path.relpath(appendix_dir, md_dir)),
                                    encoding="utf-8")

    prov = {"machine": machine, "config_sha256": run.get("config_sha256"), "model": milestones[0].stamps.get("model")}
    write_table(milestones_table(milestones), paths.milestones, provenance=prov)
    generated = {k: run.get(k) for k in ("config_sha256", "git_commit", "git_dirty", "generated_at")}
    stamps = {m.id: m.stamps for m in milestones}
    write_json(exports.inference_export(data, stamps, generated), paths.inference_json)
    write_json(exports.precomputed_export(data, stamps, generated), paths.precomputed_json)

    logits = data.json.get("sp_logits")
    if logits:
        page = workbench_html(
            logits.get("prompt", ""),
            logits["vocab"],
            logits["logits"],
            grid_records(data.table("sp_distribution")),
            [
                f"Logits of {logits.get('model')} (checkpoint sha256 {str(logits.get('checkpoint_sha256'))[:16]}…)",
                *stamp_lines(milestones[1].stamps)[1:2],
            ],
        )
    else:
        page = (
            '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Sampling workbench</title>'
            "</head><body><h1>Sampling workbench</h1><p>MISSING: results/sampling/logits.json was not produced "
            "in this workflow run.</p></body></html>"
        )
    Path(paths.workbench).write_text(page, encoding="utf-8")
    if paths.review is not None:
        bundle_and_record(paths, paths.review, metrics, changes, changes_markdown(changes), run, machine, code_hashes,
                          causes, run_id)
    return milestones

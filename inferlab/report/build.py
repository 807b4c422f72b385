"""Writing every report output from the loaded inputs (called by scripts/report.py and tests)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from inferlab.provenance import format_machine, machine_stamp
from inferlab.report import exports, runinfo
from inferlab.report.inputs import ReportInputs
from inferlab.report.milestones import Milestone, check_all
from inferlab.report.render import build_document, stamp_lines, to_html, to_markdown
from inferlab.report.stamps import milestones_table
from inferlab.report.workbench import grid_records, workbench_html
from inferlab.tables import write_json, write_table


@dataclass
class ReportPaths:
    milestones: str
    html: str
    markdown: str
    inference_json: str
    precomputed_json: str
    workbench: str
    figures: dict[str, str]  # stem -> path of the PNG (next to the Markdown, in figures/)


def run_information(config: dict, benchmark_dir: str, input_paths: list[str], machine: dict) -> dict:
    start = runinfo.run_start()
    bench = runinfo.benchmark_table(benchmark_dir) if Path(benchmark_dir).exists() else None
    outputs = runinfo.classify_outputs([str(p) for p in input_paths], start)
    return {
        "config_sha256": runinfo.config_hash(config),
        "git_commit": machine.get("git_commit"),
        "git_dirty": machine.get("git_dirty"),
        "machine": format_machine(machine),
        "generated_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "run_start": dt.datetime.fromtimestamp(start, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if start else None,
        "benchmarks": bench,
        "outputs": outputs,
    }


def write_report(data: ReportInputs, paths: ReportPaths, run: dict, machine: dict | None = None) -> list[Milestone]:
    machine = machine or machine_stamp("cpu")
    milestones = check_all(data, machine)
    doc = build_document(data, milestones, run)
    missing_fig = set(paths.figures) ^ set(doc.figures)
    if missing_fig:
        raise ValueError(f"figure list of the rule and of the package differ: {sorted(missing_fig)}")
    for stem, png in doc.figures.items():
        Path(paths.figures[stem]).parent.mkdir(parents=True, exist_ok=True)
        Path(paths.figures[stem]).write_bytes(png)
    md_dir = Path(paths.markdown).parent
    fig_rel = (
        Path(next(iter(paths.figures.values()))).parent.resolve().relative_to(md_dir.resolve())
        if paths.figures
        else "figures"
    )
    Path(paths.html).parent.mkdir(parents=True, exist_ok=True)
    Path(paths.html).write_text(to_html(doc), encoding="utf-8")
    Path(paths.markdown).write_text(to_markdown(doc, str(fig_rel)), encoding="utf-8")

    prov = {"machine": machine, "config_sha256": run.get("config_sha256"), "model": milestones[0].stamps.get("model")}
    write_table(milestones_table(milestones), paths.milestones, provenance=prov)
    generated = {k: run.get(k) for k in ("config_sha256", "git_commit", "git_dirty", "generated_at")}
    stamps = {m.id: m.stamps for m in milestones}
    write_json(exports.inference_export(data, {k: stamps[k] for k in ("M1", "M2")}, generated), paths.inference_json)
    write_json(
        exports.precomputed_export(data, {k: stamps[k] for k in ("M3", "M4")}, generated), paths.precomputed_json
    )

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
    return milestones

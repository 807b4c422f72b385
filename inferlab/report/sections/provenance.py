"""The provenance section: the run's code, machine, wall times and output freshness (tables in the appendix)."""

from __future__ import annotations

from inferlab.report.render import Document, rows_label


def tables_to_appendix(doc: Document, blocks: list[tuple]) -> list[tuple]:
    """The blocks with each table moved to the appendix and a one-line pointer to it in its place."""
    out = []
    for block in blocks:
        if block[0] == "table":
            doc.full_table("provenance-" + "-".join(block[2].split()[:3]), block[2], block[1])
            out.append(("note", f"{block[2]}: {rows_label(len(block[1]))} in the appendix."))
        else:
            out.append(block)
    return out


def section_provenance(doc: Document, run: dict) -> None:
    doc.add("h2", "Provenance of this report")
    doc.add(
        "p",
        f"Config sha256 {run.get('config_sha256')}; git commit {run.get('git_commit')}"
        f"{' (dirty working tree)' if run.get('git_dirty') else ''}; generated {run.get('generated_at')} on "
        f"{run.get('machine')}.",
    )
    if run.get("run_start"):
        doc.add(
            "p",
            f"This Snakemake run started at {run['run_start']}; files written since then were rebuilt in this "
            "run, older ones were reused from earlier runs.",
        )
    bench = run.get("benchmarks")
    blocks = []
    if bench is not None and len(bench):
        blocks.append(("table", bench.drop(columns=["mtime"], errors="ignore"),
                       "Per-job runtime and peak memory (Snakemake benchmark files, results/benchmarks)"))
    outputs = run.get("outputs")
    if outputs is not None and len(outputs):
        counts = outputs["status"].value_counts().to_dict()
        doc.add("p", "Inputs of the report: " + ", ".join(f"{v} {k}" for k, v in counts.items()) + ".")
        blocks.append(("table", outputs.drop(columns=["mtime"], errors="ignore"), "Rebuilt in this run vs reused"))
    doc.blocks += tables_to_appendix(doc, blocks)

"""The provenance section: the run's code, machine and output freshness, and the inputs' code lineage, in
two paragraphs; its tables (wall times, rebuilt vs reused, lineage) in the appendix."""

from __future__ import annotations

from inferlab.report.render import Document, rows_label


def tables_to_appendix(doc: Document, blocks: list[tuple]) -> list[tuple]:
    """The blocks with each table moved to the appendix, and one line naming them all at the end."""
    out, moved = [], []
    for block in blocks:
        if block[0] == "table":
            doc.full_table("provenance-" + "-".join(block[2].split()[:3]), block[2], block[1])
            moved.append(f"{block[2].lower()} ({rows_label(len(block[1]))})")
        else:
            out.append(block)
    return out + ([("note", "In the appendix: " + "; ".join(moved) + ".")] if moved else [])


def section_provenance(doc: Document, run: dict, lineage: list[tuple] = ()) -> None:
    """lineage: the chain check's blocks (inferlab.report.opening.lineage_blocks)."""
    doc.add("h2", "Provenance of this report")
    text = (f"Config sha256 {run.get('config_sha256')}; git commit {run.get('git_commit')}"
            f"{' (dirty working tree)' if run.get('git_dirty') else ''}; generated {run.get('generated_at')} on "
            f"{run.get('machine')}.")
    blocks = []
    outputs = run.get("outputs")
    if run.get("run_start"):
        counts = outputs["status"].value_counts().to_dict() if outputs is not None and len(outputs) else {}
        text += (f" This Snakemake run started at {run['run_start']}; of the report's inputs, those written since "
                 "then were rebuilt in it, older ones reused" + (": " + ", ".join(f"{v} {k}" for k, v in
                                                                       counts.items()) if counts else "") + ".")
    doc.add("p", text)
    bench = run.get("benchmarks")
    if bench is not None and len(bench):
        blocks.append(("table", bench.drop(columns=["mtime"], errors="ignore"),
                       "Per-job runtime and peak memory (Snakemake benchmark files, results/benchmarks)"))
    if outputs is not None and len(outputs):
        blocks.append(("table", outputs.drop(columns=["mtime"], errors="ignore"), "Rebuilt in this run vs reused"))
    doc.blocks += tables_to_appendix(doc, [*lineage, *blocks])

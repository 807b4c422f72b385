"""The report rule's review outputs: results/metrics.parquet, reports/c13-bundle.zip and the ledger entry.

The ledger (results/history/<run_id>/) is deliberately not a Snakemake output: Snakemake deletes
an output before rerunning its job, and the ledger must only ever grow.
"""

from __future__ import annotations

import datetime as dt
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from inferlab.jobs.lineage import file_sha256
from inferlab.jobs.tables import write_table
from inferlab.review import ledger
from inferlab.review.bundle import build_bundle
from inferlab.review.diff import Changes


@dataclass
class ReviewPaths:
    metrics: str  # results/metrics.parquet
    bundle: str  # reports/c13-bundle.zip
    history: str  # results/history, the ledger
    reference: str  # reports/reference/metrics.parquet, the pinned reference
    checkpoints: dict[str, str] = field(default_factory=dict)  # {name in the bundle: file}: every model the run holds
    published: dict | None = None  # a reproduction's source (inferlab.review.reproduce.describe) and its metrics

    @property
    def bundle_digest_file(self) -> str:
        """The bundle's sha256 in `sha256sum` format, beside it: what an author publishes with it (the report
        inside the bundle cannot hold the sha256 of the bundle that holds it)."""
        return f"{self.bundle}.sha256"


def unique_run_id(history: str | Path, now: dt.datetime, commit: str | None) -> str:
    """The ledger's time-commit id; a suffix when two reports finish within the same second."""
    history = Path(history)
    base = ledger.new_run_id(now, commit)
    run_id, n = base, 1
    while (history / run_id).exists():
        n += 1
        run_id = f"{base}-{n}"
    return run_id


def bundle_files(paths, review: ReviewPaths, work: Path, config: dict, changes_markdown: str) -> dict[str, Path]:
    """{name in the zip: file}: the report and its figures, the exports, the workbench, the config
    (JSON and YAML), the metrics table, the report's "Changes since …" as changes.md and every checkpoint
    (what a reproduction imports)."""
    written = {"config.json": json.dumps(config, ensure_ascii=False, indent=2, sort_keys=True, default=str) + "\n",
               "config.yaml": yaml.safe_dump(json.loads(json.dumps(config, default=str)), allow_unicode=True,
                                             sort_keys=True),
               "changes.md": changes_markdown}
    for name, text in written.items():
        (work / name).write_text(text, encoding="utf-8")
    appendix = Path(paths.appendix or Path(paths.markdown).parent / "appendix")
    return {**{Path(p).name: Path(p) for p in (paths.html, paths.markdown, paths.inference_json,
                                               paths.precomputed_json, paths.workbench)},
            **{f"figures/{p.name}": p for p in sorted(Path(paths.figures).glob("*.png"))},
            **{f"appendix/{p.name}": p for p in sorted(appendix.glob("*.csv"))},
            "metrics.parquet": Path(review.metrics), **{name: work / name for name in written},
            **{name: Path(path) for name, path in review.checkpoints.items()}}


def bundle_and_record(paths, review: ReviewPaths, metrics: pd.DataFrame, changes: Changes, changes_markdown: str,
                      run: dict, machine: dict, code_hashes: dict | None, causes: dict | None, run_id: str) -> Path:
    """1. metrics.parquet; 2. the bundle; 3. the ledger entry with the sha256 of every report file.
    Both the table and the entry keep the causes record (a pinned reference copies it from the table).
    run_id: the id the report already printed (inferlab.report.opening's "For reviewers").
    Returns the ledger entry's directory."""
    write_table(metrics, review.metrics, provenance={"machine": machine, "config_sha256": run.get("config_sha256"),
                                                     "causes": causes})
    with tempfile.TemporaryDirectory() as work:
        build_bundle(review.bundle, bundle_files(paths, review, Path(work), run.get("config") or {}, changes_markdown))
    Path(review.bundle_digest_file).write_text(f"{file_sha256(review.bundle)}  {Path(review.bundle).name}\n")
    history = Path(review.history)
    now = dt.datetime.now(dt.UTC)
    manifest = {
        "run_id": run_id if not (history / run_id).exists()
        else unique_run_id(history, now, machine.get("git_commit")),
        "config_sha256": run.get("config_sha256"),
        "code_sha256": (code_hashes or {}).get("report"),
        "code_hashes": code_hashes,
        "machine": machine,
        "compared_with": changes.old_label,
        "causes": causes,
    }
    if machine.get("git_commit"):
        manifest.update({"git_commit": machine.get("git_commit"), "git_dirty": machine.get("git_dirty")})
    report_files = [paths.milestones, paths.html, paths.markdown, paths.inference_json, paths.precomputed_json,
                    paths.workbench, review.metrics, review.bundle]
    return ledger.append_run(history, metrics, manifest, report_files, now=now)

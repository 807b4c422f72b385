"""The review layer wired into the report: metrics.parquet, the ledger, "Changes since …", the bundle,
and the chain check that turns a milestone with a stale input into `stale`.

Every table comes from the real producers (tests/test_report.py's fixtures).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from inferlab import experiments, png
from inferlab.experiments import display_name
from inferlab.jobs.lineage import file_sha256
from inferlab.quant import choice as quant_choice
from inferlab.quant.spec import SPEC as QUANT
from inferlab.report import figures
from inferlab.report.build import write_report
from inferlab.report.milestones.common import FAIL, PASS
from inferlab.report.opening import STALE_STATUS
from inferlab.review import ledger
from inferlab.review.diff import load
from inferlab.review.recording import ReviewPaths
from inferlab.review.verdicts import CHANGED, FLIPPED, NOT_COMPARABLE, UNCHANGED, WITHIN, diff_metrics
from inferlab.spec import Metric
from tests.test_report import MACHINE, QUANT_SCHEMES, _paths, full_data, quant_rows, quant_tables, spec_tables

REPO = Path(__file__).resolve().parent.parent

RUN = {"config_sha256": "c" * 64, "git_commit": "abc123", "git_dirty": False, "config": {"quick": True}}


@pytest.fixture(scope="module")
def _blank_png() -> bytes:
    return figures.to_png(plt.figure(figsize=(0.2, 0.2)))


@pytest.fixture(autouse=True)
def _figures_built_not_rasterised(monkeypatch, _blank_png):
    """This module tests the review layer, not the figures (tests/test_report.py and the end-to-end
    run draw them): each figure is built and closed, and a blank PNG stands in for its pixels.
    Rasterising the seven figures was 1.5 s of each 2.1 s report build here."""
    def unrasterised(fig) -> bytes:
        plt.close(fig)
        return _blank_png
    monkeypatch.setattr(figures, "to_png", unrasterised)
    monkeypatch.setattr(png, "to_png", unrasterised)  # the changes overlay, which the review draws


def _review_paths(tmp: Path):
    paths = _paths(tmp)
    paths.review = ReviewPaths(metrics=str(tmp / "results/metrics.parquet"),
                               bundle=str(tmp / "reports/c13-bundle.zip"),
                               history=str(tmp / "results/history"),
                               reference=str(tmp / "reports/reference/metrics.parquet"))
    return paths


def _two_runs(tmp: Path, first, second) -> tuple[pd.DataFrame, Path]:
    """Two report runs into the same directory; the diff of their ledger entries and the paths."""
    paths = _review_paths(tmp)
    write_report(first, paths, RUN, MACHINE)
    write_report(second, paths, RUN, MACHINE)
    entries = ledger.list_runs(paths.review.history)
    assert len(entries) == 2
    return diff_metrics(load(entries[0]), load(entries[1])), paths


def test_two_identical_runs_change_no_metric_and_the_report_says_so(tmp_path):
    diff, paths = _two_runs(tmp_path, full_data(), full_data())
    assert len(diff) > 20 and set(diff["verdict"]) == {"unchanged"}
    metrics = pd.read_parquet(paths.review.metrics)
    assert set(metrics["experiment"]) >= {"kvcache", "sampling", "speculative", "quant", "models", "milestones"}
    markdown = Path(paths.markdown).read_text(encoding="utf-8")
    assert "## Changes since run " in markdown and "No metric changed beyond its noise." in markdown
    changes = markdown[markdown.index("## Changes since"):markdown.index("## Setup")]
    assert "changes_overlay.png" not in changes  # two equal bars per metric say nothing the sentence does not
    assert Path(paths.figures, "changes_overlay.png").stat().st_size > 0
    assert markdown.index("**M1 PASS**") < markdown.index("## Changes since") < markdown.index("## Setup")
    assert markdown.count("> Since run ") == 4 and "no change beyond noise" in markdown


def test_the_report_tells_a_reviewer_which_run_it_is_and_what_it_can_claim(tmp_path):
    paths = _review_paths(tmp_path)
    write_report(full_data(), paths, RUN, MACHINE)
    (entry,) = ledger.list_runs(paths.review.history)
    markdown = Path(paths.markdown).read_text(encoding="utf-8")
    section = markdown[markdown.index("## For reviewers"):markdown.index("## Changes since")]
    assert f"Run {entry.name}, code commit {MACHINE['git_commit'][:12]}" in section
    assert "sha256sum -c MANIFEST.sha256" in section
    assert f"python -m inferlab.report.changes OTHER results/history/{entry.name}" in section
    metrics = pd.read_parquet(paths.review.metrics)
    timings = int(metrics["timing"].sum())
    deterministic = int((~metrics["timing"] & (metrics["experiment"] != "milestones")).sum())
    assert f"the {deterministic} deterministic metrics" in section and f"the {timings} timings" in section


def _quant_with(scheme: str, extra_loss: float, floor: float = 1.0) -> dict[str, pd.DataFrame]:
    """quant_tables, with one scheme's measured loss increase raised by extra_loss."""
    tables = quant_tables(floor)
    scored = []
    for row in quant_rows():
        delta = row["delta_loss"] + (extra_loss if row["scheme"] == scheme else 0.0)
        scored.append(pd.DataFrame([{**row, "delta_loss": delta}]))
    summary = quant_choice.summary_table(scored, QUANT_SCHEMES, floor)
    return {**tables, "quant_summary": summary, "quant_choice": quant_choice.choose_scheme(summary)}


def test_a_changed_quant_scheme_changes_only_its_rows_and_what_derives_from_them(tmp_path):
    scheme = QUANT_SCHEMES[1]
    diff, paths = _two_runs(tmp_path, full_data(), full_data(**_quant_with(scheme, 3.0)))
    moved = diff[diff["verdict"].isin([CHANGED, FLIPPED])]
    assert ("quant", "delta_loss", scheme) in set(zip(moved.experiment, moved.metric, moved.key, strict=True))
    derived = (moved["key"] == scheme) | (moved["metric"] == "chosen_scheme") | (
        (moved["experiment"] == "milestones") & (moved["key"] == "M4"))
    assert derived.all(), moved[~derived].to_string()
    markdown = Path(paths.markdown).read_text(encoding="utf-8")
    cards = markdown.split("## Changes since", 1)[0]
    m4_card, other_cards = cards.split("**M4 ", 1)[1], cards.split("**M4 ", 1)[0]
    # the M4 card counts what moved and names its cause once; the others saw nothing move
    assert "changed" in m4_card.split("\n\n", 3)[2] and "changed" not in other_cards.split("For reviewers")[0]
    assert "changes_overlay.png" in markdown.split("## Changes since", 1)[1].split("## Setup", 1)[0]


def test_the_bundles_changes_md_is_the_reports_changes_section(tmp_path):
    """One renderer: the bundle's changes.md holds the very blocks of the report's "Changes since …", so both
    list the same metrics under the same causes."""
    import zipfile

    scheme = QUANT_SCHEMES[1]
    _, paths = _two_runs(tmp_path, full_data(), full_data(**_quant_with(scheme, 3.0)))
    markdown = Path(paths.markdown).read_text(encoding="utf-8")
    section = "## Changes since" + markdown.split("## Changes since", 1)[1].split("\n## ", 1)[0]
    with zipfile.ZipFile(paths.review.bundle) as bundle:
        changes_md = bundle.read("changes.md").decode("utf-8")
    assert f"| {scheme} |" in section and changes_md.strip() == section.strip()


def test_a_pass_to_fail_flip_heads_the_diff_and_the_report(tmp_path):
    diff, paths = _two_runs(tmp_path, full_data(), full_data(**spec_tables(all_identical=False)))
    first = diff.iloc[0]
    assert (first["verdict"], first["key"], first["old_text"], first["new_text"]) == (FLIPPED, "M3", PASS, FAIL)
    markdown = Path(paths.markdown).read_text(encoding="utf-8")
    changes = markdown.split("## Changes since", 1)[1]
    first_row = next(line for line in changes.splitlines() if line.startswith(("| flipped", "| changed")))
    assert first_row.startswith("| flipped") and "M3" in first_row
    assert "flipped pass → fail" in markdown.split("## Changes since", 1)[0]


def _on_machine(data, fingerprint: str):
    """The same tables, measured on the machine with this hardware fingerprint."""
    for key, prov in data.provenance.items():
        data.provenance[key] = {**prov, "machine": {**prov["machine"], "fingerprint": fingerprint}}
    return data


def report_against_another_machine(tmp: Path):
    """A report whose pinned reference is this run as another machine measured it, every timing 1.5× this
    run's: only timings moved, on another machine. Returns the paths and the reference."""
    paths = _review_paths(tmp)
    data = _on_machine(full_data(), "b" * 64)
    write_report(data, paths, RUN, MACHINE)  # its metrics, as another machine measured them: the reference
    reference = pd.read_parquet(paths.review.metrics).assign(machine_fingerprint="a" * 64)
    timing = reference["timing"].astype(bool)
    reference.loc[timing, ["value", "low", "high"]] *= 1.5
    shutil.rmtree(paths.review.history)
    Path(paths.review.reference).parent.mkdir(parents=True)
    reference.to_parquet(paths.review.reference)
    write_report(data, paths, RUN, MACHINE)
    return paths, reference


def test_timings_from_another_machine_fold_into_one_line_with_display_names_inside(tmp_path):
    """Issue 59: against a reference from another machine every timing is not comparable, as expected: the
    Changes section says so in one line naming both fingerprints; the timings are listed only in the folded
    details, whose tables read as a reader names things (no metric ids, no noise-kind ids)."""
    paths, reference = report_against_another_machine(tmp_path)
    d = diff_metrics(reference, pd.read_parquet(paths.review.metrics))
    moved = d[~d["verdict"].isin([UNCHANGED, WITHIN])]
    assert len(moved) > 10 and (moved["verdict"] == NOT_COMPARABLE).all() and moved["timing"].all()
    markdown = Path(paths.markdown).read_text(encoding="utf-8")
    section = markdown[markdown.index("## Changes since"):markdown.index("## Setup")]
    line = f"{len(moved)} timing metrics not comparable: another machine (fingerprint aaaaaaaa → bbbbbbbb)"
    assert section.startswith("## Changes since") and f"<details><summary>{line}</summary>" in section
    before, folded = section.split("<details>", 1)  # one fold, its causes folded inside it
    folded, after = folded.rsplit("</details>", 1)
    assert "|" not in before + after and "changes_overlay.png" in folded  # no table of them in the body
    header = next(row for row in folded.splitlines() if row.startswith("| verdict"))
    assert header == "| verdict | experiment | metric | key | old | new | Δ | Δ% | noise kind |"
    assert f"| {display_name('ms_per_token')} |" in folded and "| min–max over reruns |" in folded
    assert "ms_per_token" not in folded and "rep_range" not in folded
    html = Path(paths.html).read_text(encoding="utf-8")
    assert f'<details class="folded"><summary>{line}</summary>' in html


def test_a_new_metric_is_declared_in_its_experiments_spec_alone(tmp_path, monkeypatch):
    """Issue 59: a column and its display name are added in one file, the experiment's spec; the metrics
    table, the export, the appendix and the diff all find it there."""
    column, name = "loss_over_bits", "Δ loss per bit (nats)"
    spec = replace(QUANT, metrics=(*QUANT.metrics, Metric(column, "quant_summary", column, "{scheme}", "nats")),
                   columns={**QUANT.columns, column: name})
    monkeypatch.setattr(experiments, "SPECS", tuple(spec if s is QUANT else s for s in experiments.SPECS))

    def run(extra: float):
        data = full_data()
        summary = data.tables["quant_summary"]
        summary[column] = summary["delta_loss"] / summary["bits"] + extra * (summary["scheme"] == QUANT_SCHEMES[1])
        return data

    diff, paths = _two_runs(tmp_path, run(0.0), run(0.5))
    metrics = pd.read_parquet(paths.review.metrics)
    assert set(metrics.loc[metrics["metric"] == column, "key"]) == set(QUANT_SCHEMES)
    exported = json.loads(Path(paths.precomputed_json).read_text(encoding="utf-8"))
    assert all(column in row for row in exported["quantization"]["summary"])
    html = Path(paths.html).read_text(encoding="utf-8")
    assert f"<th>{name}</th>" in html.split('id="appendix"')[1]  # the appendix's quantization table
    moved = diff[(diff["metric"] == column) & (diff["verdict"] == CHANGED)]
    assert list(moved["key"]) == [QUANT_SCHEMES[1]]
    assert f"| {name} |" in Path(paths.markdown).read_text(encoding="utf-8").split("## Setup")[0]


@pytest.mark.skipif(shutil.which("sha256sum") is None, reason="needs coreutils sha256sum")
def test_the_bundle_holds_the_review_files_and_its_manifest_verifies(tmp_path):
    paths = _review_paths(tmp_path)
    write_report(full_data(), paths, RUN, MACHINE)
    unpacked = tmp_path / "unpacked"
    with zipfile.ZipFile(paths.review.bundle) as archive:
        names = set(archive.namelist())
        archive.extractall(unpacked)
    assert {"c13-report.html", "c13-report.md", "c13-inference.json", "precomputed.json", "sampling-workbench.html",
            "metrics.parquet", "config.json", "config.yaml", "changes.md", "MANIFEST.sha256",
            "figures/changes_overlay.png", "appendix/sampling-cells.csv", "appendix/input-spec-identity.csv"} <= names
    check = subprocess.run(["sha256sum", "-c", "MANIFEST.sha256"], cwd=unpacked, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    (unpacked / "metrics.parquet").write_bytes(b"tampered")
    assert subprocess.run(["sha256sum", "-c", "--quiet", "MANIFEST.sha256"], cwd=unpacked,
                          capture_output=True).returncode != 0
    manifest = ledger.read_manifest(ledger.list_runs(paths.review.history)[0])
    assert manifest["report_files"][paths.review.bundle] == file_sha256(paths.review.bundle)


def _with_lineage(data, key: str, rule: str, code: str):
    data.provenance[key] = {**data.provenance[key],
                            "lineage": {"rule": rule, "code_sha256": code, "config_sha256": "x", "inputs_sha256": {}}}
    return data


def test_a_stale_input_turns_its_milestone_stale_and_the_stamps_name_the_code(tmp_path):
    paths = _review_paths(tmp_path)
    data = _with_lineage(_with_lineage(full_data(), "quant_summary", "quant_summary", "old" * 10),
                         "kv_summary", "kvcache_summary", "k" * 64)
    hashes = {"quant_summary": "new" * 10, "kvcache_summary": "k" * 64}
    milestones = write_report(data, paths, RUN, MACHINE, code_hashes=hashes, workdir=str(tmp_path))
    assert {m.id: m.status for m in milestones} == {"M1": PASS, "M2": PASS, "M3": PASS, "M4": STALE_STATUS}
    table = pd.read_parquet(paths.milestones).set_index("milestone")
    assert table.loc["M4", "status"] == STALE_STATUS and "quant_summary" in table.loc["M4", "stale_inputs"]
    assert table.loc["M4", "problems"] == ""  # stale is not a failure: its reasons are said once
    markdown = Path(paths.markdown).read_text(encoding="utf-8")
    assert "**M4 STALE**" in markdown and "code kvcache_summary kkkkkkkkkkkk" in markdown
    assert table.loc["M4", "headline"].startswith("STALE (rebuild quant_summary)")
    assert "Code lineage of the inputs" in markdown
    metrics = pd.read_parquet(paths.review.metrics).set_index(["experiment", "metric", "key"])
    assert metrics.loc[("milestones", "status", "M4"), "text_value"] == STALE_STATUS


def test_a_model_stamp_that_names_another_checkpoint_makes_its_milestone_stale(tmp_path):
    """Issue 24: the quant summary's stamp edited to another checkpoint, its lineage left alone."""
    paths = _review_paths(tmp_path)
    data = full_data()
    forged = {**data.provenance["quant_summary"]["model"], "checkpoint_sha256": "d" * 64}
    data.provenance["quant_summary"] = {**data.provenance["quant_summary"], "model": forged}
    milestones = write_report(data, paths, RUN, MACHINE, code_hashes={}, workdir=str(tmp_path))
    assert {m.id: m.status for m in milestones} == {"M1": PASS, "M2": PASS, "M3": PASS, "M4": STALE_STATUS}
    problems = pd.read_parquet(paths.milestones).set_index("milestone").loc["M4", "stale_inputs"]
    assert "quant_summary" in problems and "d" * 12 in problems and "f" * 12 in problems
    assert "results/models/ref_baseline/meta.json" in problems


def test_a_stamp_that_disagrees_with_the_weights_in_its_lineage_is_found():
    from inferlab.review.lineage_graph import stamp_disagreements
    weights = "results/models/ref_baseline/model.safetensors"
    provenance = {
        "agrees": {"model": {"model": "ref_baseline", "checkpoint_sha256": "a" * 64},
                   "lineage": {"inputs_sha256": {weights: "a" * 64}}},
        "lineage_differs": {"model": {"model": "ref_baseline", "checkpoint_sha256": "a" * 64},
                            "lineage": {"inputs_sha256": {weights: "b" * 64}}},
        "no_stamp": {"lineage": {"inputs_sha256": {weights: "b" * 64}}},
    }
    found = stamp_disagreements(provenance, {"ref_baseline": {"weights_sha256": "a" * 64}})
    assert set(found) == {"lineage_differs"}
    assert f"its lineage input {weights} says {'b' * 12}" in found["lineage_differs"]


@pytest.mark.parametrize("damage", [b"PAR1\x00\x00\x00", b"", b"not a table at all"],
                         ids=["truncated", "empty", "text"])
def test_a_damaged_reference_never_blocks_the_report_and_the_diff_says_which_file(tmp_path, damage):
    """Issue 24: the pinned reference is comparison material: the report is built without it."""
    paths = _review_paths(tmp_path)
    Path(paths.review.reference).parent.mkdir(parents=True)
    Path(paths.review.reference).write_bytes(damage)
    milestones = write_report(full_data(), paths, RUN, MACHINE)
    assert {m.status for m in milestones} == {PASS}
    markdown = Path(paths.markdown).read_text(encoding="utf-8")
    section = markdown.split("## Changes since", 1)[1]
    assert f"No comparison: {paths.review.reference} could not be read" in section
    cli = subprocess.run([sys.executable, "-m", "inferlab.report.changes", paths.review.reference,
                          paths.review.metrics], capture_output=True, text=True, cwd=REPO)
    assert cli.returncode == 2 and "Traceback" not in cli.stderr
    assert cli.stderr.strip().count("\n") == 0 and paths.review.reference in cli.stderr


def test_a_damaged_ledger_manifest_is_named_not_a_traceback(tmp_path):
    paths = _review_paths(tmp_path)
    write_report(full_data(), paths, RUN, MACHINE)
    (ledger.list_runs(paths.review.history)[0] / ledger.MANIFEST_FILE).write_text("{ truncated", encoding="utf-8")
    write_report(full_data(), paths, RUN, MACHINE)
    section = Path(paths.markdown).read_text(encoding="utf-8").split("## Changes since", 1)[1]
    assert "No comparison:" in section and "manifest.json could not be read" in section
